r"""Classify image files with a trained image-classification workdir, or
texts with a text-classification one (fine-tuned here, or a converted
BertForSequenceClassification).

    python -m transformer.tools.predict --workdir=workdirs/vit_offline \
        cat.png dog.jpg
    python -m transformer.tools.predict --workdir=DIR --top_k=3 \
        --attention_dir=maps/ images/*.png
    echo "a gripping, funny film" | python -m transformer.tools.predict \
        --workdir=workdirs/sst2
    python -m transformer.tools.predict --workdir=workdirs/rte pairs.tsv

Texts: one per line, of the files given (stdin without any); a line with a
tab is a sentence pair (`a<TAB>b`, as GLUE's pair tasks read them): a pair
model's lines have exactly one tab, a single-sentence model's none (a
converted classifier takes either). Prints each line with its top-k
classes and their probabilities (a regression model, STS-B's: its score),
tab-separated, one record per line: a newline, tab or other control
character in a file name or text is printed as an escape (`\n`, `\t`,
`\u202e`; a backslash as `\\`).

Each image is read (RGB or grey, as the model was trained), its shorter
side resized to the training's stored size and the centre cropped to the
model's input size, as in evaluation. Prints the top-k classes with their
probabilities; with --attention_dir also writes, per image, the class
token's attention over the patches (last layer's heads and the rollout,
NAME_attention.png, and every layer's heads and their mean,
NAME_layer_K.png), NAME the image's path from the images' common folder
without its extension (a/cat.png and b/cat.png: a/cat_attention.png and
b/cat_attention.png); maps already there are refused before any work
unless --overwrite (so are names too long for the file system), and the
maps appear once every image is classified, or not at all.
`classify(workdir, paths, ...)` does the same from python.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import flags
import numpy as np

from transformer import workdir as workdir_lib
from transformer.data import glue
from transformer.data import images as image_data
from transformer.data import reading
from transformer.insight import attention_figures
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('workdir', None, 'An image- or text-classification '
                      'workdir.', required=True)
  flags.DEFINE_integer('top_k', 5, 'Classes to print per image.')
  flags.DEFINE_string('attention_dir', None,
                      'Write attention maps (PNG) here.')
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  flags.DEFINE_integer('batch_size', 64, 'Images (or texts) per batch.')
  cli.define_overwrite_flag()


# (path, [(class name, probability)] best first) per image.
Predictions = list[tuple[str, list[tuple[str, float]]]]


def classify(workdir: str, paths: Sequence[str], *, top_k: int = 5,
             attention_dir: str | None = None, average: int = 1,
             batch_size: int = 64, overwrite: bool = False
             ) -> tuple[Predictions, int]:
  """The top-k classes of each image file, and the step of the checkpoint
  used; with `attention_dir`, attention maps written there (see the module
  docstring; maps already there are refused unless `overwrite`)."""
  if not paths:
    raise ValueError('Give image files to classify after the flags.')
  for path in paths:
    cli.check_input_file(None, path, 'PNG or JPEG image files')
  for name, value in (('top_k', top_k), ('average', average),
                      ('batch_size', batch_size)):
    cli.check_flag(name, value, at_least=1)
  config = cli.workdir_config(workdir, 'image_classification')
  names = dict(zip(paths, cli.output_names(paths)))
  maps = (_attention_maps(attention_dir, set(names.values()))
          if attention_dir else [])
  cli.check_outputs(maps, overwrite=overwrite)
  restored = workdir_lib.restore(workdir, average=average)
  task = restored.task
  if attention_dir and task.model_config.pooling != 'token':
    raise ValueError('--attention_dir shows the class token\'s attention; '
                     'this model pools with "gap" and has none.')
  size = config.data.load_size or config.data.image_size
  top_k = min(top_k, len(task.class_names))
  predictions, drawn = [], set()
  # The maps appear once every image is classified, or not at all.
  with cli.Writing(maps, overwrite=overwrite) as writing, restored.active():
    for begin in range(0, len(paths), batch_size):
      batch = paths[begin:begin + batch_size]
      pictures = np.stack([image_data.read_image(p, size, task.num_channels)
                           for p in batch])
      for path, picture, row in zip(batch, pictures,
                                    task.predict(restored.params, pictures)):
        best = np.argsort(-row)[:top_k]
        predictions.append(
            (path, [(task.class_names[i], float(row[i])) for i in best]))
        if attention_dir and names[path] not in drawn:  # once per file
          drawn.add(names[path])
          attention_figures.class_token_attention(
              task, restored.params, picture, writing.path(os.path.join(
                  attention_dir, f'{names[path]}_attention.png')))
          attention_figures.layer_attention(
              task, restored.params, picture,
              writing.path(os.path.join(attention_dir, names[path])))
  return predictions, restored.step


def _attention_maps(folder: str, names: set[str]) -> list[cli.Output]:
  """The maps `classify` writes for images of these names."""
  return [output for name in sorted(names) for output in (
      cli.Output('--attention_dir',
                 os.path.join(folder, f'{name}_attention.png')),
      cli.Output('--attention_dir',
                 os.path.join(folder, f'{name}_layer_.png'), numbered=True))]


def reads_pairs(config) -> bool | None:
  """Whether a text-classification workdir's model reads sentence pairs
  (its GLUE task is a pair task), one sentence (a single-sentence task, or
  one of our runs without a GLUE task), or either: None for a converted
  classifier (its tokenizer 'bert' without `init_from`), whose config does
  not say what it was trained on."""
  if config.data.glue_task:
    return glue.spec(config.data.glue_task).pair
  if config.data.tokenizer == 'bert' and not config.train.init_from:
    return None
  return False


def _check_shape(lines: Sequence[str], pairs: bool | None,
                 source: str = '') -> None:
  """Refuses lines whose tabs do not fit the model (see `reads_pairs`):
  exactly one tab per line for a pair model, none for a single-sentence
  one, at most one where either goes; names the lines (from 1) and their
  `source` (a file)."""
  allowed = {True: (1,), False: (0,), None: (0, 1)}[pairs]
  bad = [(number, line.count('\t')) for number, line in enumerate(lines, 1)
         if line.count('\t') not in allowed]
  if not bad:
    return
  tabs = lambda count: 'no tab' if count == 0 else (
      '1 tab' if count == 1 else f'{count} tabs')
  shown = ', '.join(f'{number} ({tabs(count)})' for number, count in bad[:5])
  shown = ('line ' if len(bad) == 1 else 'lines ') + shown + (
      f' and {len(bad) - 5} more' if len(bad) > 5 else '') + (
          f' of {source}' if source else '')
  if pairs:
    what = ('This model classifies sentence pairs: each line is two '
            'sentences separated by one tab (sentence1<TAB>sentence2)')
  elif pairs is False:
    what = ('This model classifies single sentences: each line is one '
            'sentence, without tabs')
  else:
    what = ('Each line is one sentence, or a pair separated by one tab '
            '(sentence1<TAB>sentence2)')
  raise ValueError(f'{what}; not {shown}.')


def classify_texts(workdir: str, lines: Sequence[str], *, top_k: int = 5,
                   average: int = 1) -> tuple[Predictions, int]:
  """The top-k classes (or the regression score) of each text line, a tab
  separating a pair's two sentences, and the step of the checkpoint used.
  Lines whose tabs do not fit the model are refused (`reads_pairs`)."""
  for name, value in (('top_k', top_k), ('average', average)):
    cli.check_flag(name, value, at_least=1)
  config = cli.workdir_config(workdir, 'text_classification')
  if not lines:
    raise ValueError('No texts to classify: give lines on stdin or text '
                     'files after the flags.')
  _check_shape(lines, reads_pairs(config))
  rows = [(*(line.split('\t', 1) + [None])[:2], 0.0) for line in lines]
  restored = workdir_lib.restore(workdir, average=average)
  task = restored.task
  with restored.active():
    scores = task.scores(restored.params, rows)
  names = task.class_names
  if task.num_classes == 1:
    return [(line, [('score', float(row[0]))])
            for line, row in zip(lines, scores)], restored.step
  return [(line, [(names[i], float(row[i]))
                  for i in np.argsort(-row)[:top_k]])
          for line, row in zip(lines, scores)], restored.step


def _text_lines(paths: Sequence[str], pairs: bool | None) -> list[str]:
  """The lines of the files (stdin without any), each file's refused by
  `_check_shape` naming it."""
  if not paths:
    lines = reading.split_lines(reading.decode_text(sys.stdin.buffer.read(),
                                              'standard input'))
    _check_shape(lines, pairs, 'standard input')
    return lines
  found = []
  for path in paths:
    lines = cli.input_lines(None, path)
    _check_shape(lines, pairs, path)
    found += lines
  return found


def main(argv):
  args = flags.FLAGS
  cli.check_flag('batch_size', args.batch_size, at_least=1)
  config = workdir_lib.load_config(args.workdir)
  if config.task == 'text_classification':
    if args.attention_dir:
      raise ValueError('--attention_dir draws image attention maps; for a '
                       'text model, python -m transformer.tools.explore '
                       f'--workdir={args.workdir} --input=TEXT shows every '
                       'layer and head.')
    predictions, step = classify_texts(
        args.workdir, _text_lines(argv[1:], reads_pairs(config)),
        top_k=args.top_k, average=args.average)
  else:
    predictions, step = classify(
        args.workdir, argv[1:], top_k=args.top_k,
        attention_dir=args.attention_dir, average=args.average,
        batch_size=args.batch_size, overwrite=args.overwrite)
  for path, best in predictions:
    # One record per line: a name or a text with a newline or a tab of its
    # own is escaped (so is a pair's tab).
    sys.stdout.write(cli.printable(path) + '\t' + '  '.join(
        f'{name} {probability:.3f}' for name, probability in best) + '\n')
  print(f'Classified with the checkpoint of step {step}.', file=sys.stderr)


def run() -> None:
  """The `transformer-predict` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
