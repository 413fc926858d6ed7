"""Translate sentences with a trained workdir.

    echo "the red house" | python -m transformer.tools.translate --workdir=DIR
    python -m transformer.tools.translate --workdir=DIR --input=src.txt \
        --output=hyp.txt --beam_size=4 --length_penalty=0.6 --average=5

Reads one sentence per line (a file or stdin), writes one translation per
line (a file or stdout), from the workdir's latest checkpoint or the average
of its last `--average` checkpoints. Defaults come from the workdir's config.
An --output (or --alignments) file that is already there is refused before
any work unless --overwrite; the files appear whole when the translations
are done, or not at all (`cli.Writing`).
`translate(workdir, sentences)` does the same from python.

`--alignments=FILE` also writes, one JSON line per sentence, where the
model looked while it wrote each output piece: the decoder's attention over
the source pieces (the RNN's a_{t,i}; for the Transformer the
cross-attention averaged over the decoder layers and heads, or the ones
`--alignment_layer` and `--alignment_head` pick), as the full [target,
source] matrix and as its argmax in Pharaoh format ("source-target" index
pairs, as fast_align writes them):

    {"source": "...", "translation": "...", "source_pieces": [...],
     "translation_pieces": [...], "layer": "mean", "head": "mean",
     "weights": [[...], ...], "alignment": "0-0 1-2 2-1 ..."}
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NamedTuple, Sequence

import numpy as np

from absl import flags

from transformer import workdir as workdir_lib
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('workdir', None, 'A training workdir.', required=True)
  flags.DEFINE_string('input', '-', 'Source file; - for stdin.')
  flags.DEFINE_string('output', '-', 'Output file; - for stdout.')
  flags.DEFINE_integer('beam_size', None,
                       'Beam size (1: greedy); default: config.')
  flags.DEFINE_float('length_penalty', None,
                     'GNMT length penalty alpha; default: config.')
  flags.DEFINE_integer('max_length_offset', None, 'Output length limit = '
                       'input length + this; default: config.')
  flags.DEFINE_integer('average', None,
                       'Average the last N checkpoints; default: config.')
  flags.DEFINE_string('alignments', None, 'Also write each sentence\'s '
                      'source-target attention to this JSON Lines file.')
  flags.DEFINE_integer('alignment_layer', None, 'The decoder layer of '
                       '--alignments (from 0); default: the mean of all.')
  flags.DEFINE_integer('alignment_head', None, 'The head of --alignments '
                       '(from 0); default: the mean of all.')
  cli.define_overwrite_flag()


class Translated(NamedTuple):
  translations: list[str]
  step: int  # of the checkpoint used
  alignments: list[dict[str, Any]] | None  # per sentence, when asked for


def translate(workdir: str, sentences: Sequence[str], *,
              beam_size: int | None = None,
              length_penalty: float | None = None,
              max_length_offset: int | None = None,
              average: int | None = None, alignments: bool = False,
              alignment_layer: int | None = None,
              alignment_head: int | None = None) -> Translated:
  """Translations of `sentences`, the step of the checkpoint used and, with
  `alignments`, each sentence's alignment record (see the module
  docstring); every option left at None takes the workdir's config value."""
  if not sentences:
    raise ValueError('No sentences to translate: pass them one per line on '
                     'standard input or in --input=FILE.')
  for name, value, least in (('beam_size', beam_size, 1),
                             ('length_penalty', length_penalty, 0),
                             ('max_length_offset', max_length_offset, 0),
                             ('average', average, 1),
                             ('alignment_layer', alignment_layer, 0),
                             ('alignment_head', alignment_head, 0)):
    cli.check_flag(name, value, at_least=least)
  config = cli.workdir_config(workdir, 'translation')
  pick = lambda value, default: default if value is None else value
  restored = workdir_lib.restore(
      workdir, average=pick(average, config.eval.average_checkpoints))
  task = restored.task
  if alignments:  # a layer or head the model lacks is refused first
    _check_alignment_flags(task, alignment_layer, alignment_head)
  with restored.active():
    pairs = task.translate_ids(
        restored.params, sentences,
        beam_size=pick(beam_size, config.eval.beam_size),
        length_penalty=pick(length_penalty, config.eval.length_penalty),
        max_length_offset=pick(max_length_offset,
                               config.eval.max_length_offset))
    weights = (task.alignments(restored.params, pairs, layer=alignment_layer,
                               head=alignment_head) if alignments else None)
  translations = [task.tokenizer.decode(output) for _, output in pairs]
  records = None
  if alignments:
    pieces = lambda ids: [task.tokenizer.id_to_piece(int(i)) for i in ids]
    name = lambda value: 'mean' if value is None else value
    records = [{'source': source, 'translation': translation,
                'source_pieces': pieces(ids), 'translation_pieces':
                pieces(output), 'layer': name(alignment_layer),
                'head': name(alignment_head),
                'weights': np.round(matrix, 4).tolist(),
                'alignment': pharaoh(matrix)}
               for source, translation, (ids, output), matrix
               in zip(sentences, translations, pairs, weights)]
  return Translated(translations, restored.step, records)


def _check_alignment_flags(task, layer: int | None, head: int | None
                           ) -> None:
  """Refuses --alignment_layer or --alignment_head beyond the model's
  decoder layers and heads (or given at all for the RNN's one alignment),
  naming the flag and the range."""
  given = {'alignment_layer': layer, 'alignment_head': head}
  if task.config.model.family == 'rnn':
    named = ' '.join(f'--{name}={value}' for name, value in given.items()
                     if value is not None)
    try:
      task.alignment_layers(layer, head)
    except ValueError as e:
      raise ValueError(f'{named or "--alignments"}: {e}') from None
    return
  counts = {'alignment_layer': (task.model_config.num_layers,
                                'decoder layers'),
            'alignment_head': (getattr(task.model_config, 'num_heads', 1),
                               'heads per layer')}
  for name, value in given.items():
    count, what = counts[name]
    if value is not None and not 0 <= value < count:
      raise ValueError(f'--{name}={value} is out of range: the model has '
                       f'{count} {what}, numbered 0 to {count - 1}; give '
                       f'one of them, or leave --{name} out for their '
                       f'mean.')
  task.alignment_layers(layer, head)


def pharaoh(weights: np.ndarray) -> str:
  """'i-j' for each target piece j and the source piece i it attends to
  most, in target order (the format of fast_align and Moses)."""
  return ' '.join(f'{i}-{j}' for j, i in enumerate(np.argmax(weights, -1)))


def _check_output(path: str, flag: str = 'output',
                  example: str = 'hyp.txt') -> None:
  """Refuses an output file that cannot be written, before any decoding
  (a flag that names a file needs its folder; `cli.check_outputs` then
  applies the rule of every command's outputs)."""
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(f'--{flag}={path}: the folder {folder} does not '
                            f'exist; create it first.')
  if os.path.isdir(path):
    raise ValueError(f'--{flag}={path} is a folder; give the path of the '
                     f'file to write, e.g. --{flag}={path}/{example}.')


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  if args.output != '-':
    _check_output(args.output)
  if args.alignments:
    _check_output(args.alignments, 'alignments', 'alignments.jsonl')
  elif args.alignment_layer is not None or args.alignment_head is not None:
    raise ValueError('--alignment_layer and --alignment_head choose what '
                     '--alignments=FILE writes; give --alignments too.')
  outputs = [cli.Output(f'--{flag}', path) for flag, path in
             (('output', args.output), ('alignments', args.alignments))
             if path and path != '-']
  cli.check_outputs(outputs, overwrite=args.overwrite, inputs=[args.input])
  sentences = cli.input_lines('--input', args.input)
  with cli.Writing(outputs, overwrite=args.overwrite) as writing:
    translations, step, alignments = translate(
        args.workdir, sentences, beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        max_length_offset=args.max_length_offset, average=args.average,
        alignments=bool(args.alignments),
        alignment_layer=args.alignment_layer,
        alignment_head=args.alignment_head)
    if alignments is not None:
      writing.write(args.alignments, ''.join(
          json.dumps(record, ensure_ascii=False) + '\n'
          for record in alignments))
    output = ''.join(t + '\n' for t in translations)
    if args.output != '-':
      writing.write(args.output, output)
  if args.output == '-':
    sys.stdout.write(output)
  print(f'Translated {len(sentences)} sentences with the checkpoint of step '
        f'{step}.', file=sys.stderr)


def run() -> None:
  """The `transformer-translate` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
