"""Translate sentences with a trained workdir.

    echo "the red house" | python -m transformer.tools.translate --workdir=DIR
    python -m transformer.tools.translate --workdir=DIR --input=src.txt \
        --output=hyp.txt --beam_size=4 --length_penalty=0.6 --average=5

Reads one sentence per line (a file or stdin), writes one translation per
line (a file or stdout), from the workdir's latest checkpoint or the average
of its last `--average` checkpoints. Defaults come from the workdir's config.
`translate(workdir, sentences)` does the same from python.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import flags

from transformer import workdir as workdir_lib
from transformer.data import text
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


def translate(workdir: str, sentences: Sequence[str], *,
              beam_size: int | None = None,
              length_penalty: float | None = None,
              max_length_offset: int | None = None,
              average: int | None = None) -> tuple[list[str], int]:
  """Translations of `sentences` and the step of the checkpoint used; every
  option left at None takes the workdir's config value."""
  if not sentences:
    raise ValueError('No sentences to translate: pass them one per line on '
                     'standard input or in --input=FILE.')
  for name, value, least in (('beam_size', beam_size, 1),
                             ('length_penalty', length_penalty, 0),
                             ('max_length_offset', max_length_offset, 0),
                             ('average', average, 1)):
    cli.check_flag(name, value, at_least=least)
  config = cli.workdir_config(workdir, 'translation')
  pick = lambda value, default: default if value is None else value
  restored = workdir_lib.restore(
      workdir, average=pick(average, config.eval.average_checkpoints))
  with restored.active():
    translations = restored.task.translate(
        restored.params, sentences,
        beam_size=pick(beam_size, config.eval.beam_size),
        length_penalty=pick(length_penalty, config.eval.length_penalty),
        max_length_offset=pick(max_length_offset,
                               config.eval.max_length_offset))
  return translations, restored.step


def _check_output(path: str) -> None:
  """Refuses an --output that cannot be written, before any decoding."""
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(f'--output={path}: the folder {folder} does not '
                            f'exist; create it first.')
  if os.path.isdir(path):
    raise ValueError(f'--output={path} is a folder; give the path of the '
                     f'file to write, e.g. --output={path}/hyp.txt.')


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  if args.output != '-':
    _check_output(args.output)
  if args.input == '-':
    sentences = text.split_lines(text.decode_utf8(sys.stdin.buffer.read(),
                                                  'standard input'))
  else:
    sentences = text.utf8_lines(args.input)
  translations, step = translate(
      args.workdir, sentences, beam_size=args.beam_size,
      length_penalty=args.length_penalty,
      max_length_offset=args.max_length_offset, average=args.average)
  output = ''.join(t + '\n' for t in translations)
  if args.output == '-':
    sys.stdout.write(output)
  else:
    with open(args.output, 'w', encoding='utf-8') as f:
      f.write(output)
  print(f'Translated {len(sentences)} sentences with the checkpoint of step '
        f'{step}.', file=sys.stderr)


def run() -> None:
  """The `transformer-translate` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
