"""Classify image files with a trained image-classification workdir.

    python -m transformer.tools.predict --workdir=workdirs/vit_offline \
        cat.png dog.jpg
    python -m transformer.tools.predict --workdir=DIR --top_k=3 \
        --attention_dir=maps/ images/*.png

Each image is read (RGB or grey, as the model was trained), its shorter
side resized to the training's stored size and the centre cropped to the
model's input size, as in evaluation. Prints the top-k classes with their
probabilities; with --attention_dir also writes, per image, the class
token's attention over the patches (last layer's heads and the rollout,
NAME_attention.png, and every layer's heads and their mean,
NAME_layer_K.png).
`classify(workdir, paths, ...)` does the same from python.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import flags
import numpy as np

from transformer import workdir as workdir_lib
from transformer.data import images as image_data
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('workdir', None, 'An image-classification workdir.',
                      required=True)
  flags.DEFINE_integer('top_k', 5, 'Classes to print per image.')
  flags.DEFINE_string('attention_dir', None,
                      'Write attention maps (PNG) here.')
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  flags.DEFINE_integer('batch_size', 64, 'Images per batch.')


# (path, [(class name, probability)] best first) per image.
Predictions = list[tuple[str, list[tuple[str, float]]]]


def classify(workdir: str, paths: Sequence[str], *, top_k: int = 5,
             attention_dir: str | None = None, average: int = 1,
             batch_size: int = 64) -> tuple[Predictions, int]:
  """The top-k classes of each image file, and the step of the checkpoint
  used; with `attention_dir`, attention maps written there."""
  if not paths:
    raise ValueError('Give image files to classify after the flags.')
  missing = [p for p in paths if not os.path.isfile(p)]
  if missing:
    raise FileNotFoundError(f'No such files: {missing}')
  for name, value in (('top_k', top_k), ('average', average),
                      ('batch_size', batch_size)):
    cli.check_flag(name, value, at_least=1)
  config = cli.workdir_config(workdir, 'image_classification')
  restored = workdir_lib.restore(workdir, average=average)
  task = restored.task
  if attention_dir and task.model_config.pooling != 'token':
    raise ValueError('--attention_dir shows the class token\'s attention; '
                     'this model pools with "gap" and has none.')
  size = config.data.load_size or config.data.image_size
  top_k = min(top_k, len(task.class_names))
  predictions = []
  with restored.active():
    for begin in range(0, len(paths), batch_size):
      batch = paths[begin:begin + batch_size]
      pictures = np.stack([image_data.read_image(p, size, task.num_channels)
                           for p in batch])
      for path, picture, row in zip(batch, pictures,
                                    task.predict(restored.params, pictures)):
        best = np.argsort(-row)[:top_k]
        predictions.append(
            (path, [(task.class_names[i], float(row[i])) for i in best]))
        if attention_dir:
          name = os.path.splitext(os.path.basename(path))[0]
          task.plot_attention(restored.params, picture, os.path.join(
              attention_dir, f'{name}_attention.png'))
          task.plot_layer_attention(restored.params, picture, os.path.join(
              attention_dir, name))
  return predictions, restored.step


def main(argv):
  args = flags.FLAGS
  predictions, step = classify(
      args.workdir, argv[1:], top_k=args.top_k,
      attention_dir=args.attention_dir, average=args.average,
      batch_size=args.batch_size)
  for path, best in predictions:
    sys.stdout.write(path + '\t' + '  '.join(
        f'{name} {probability:.3f}' for name, probability in best) + '\n')
  print(f'Classified with the checkpoint of step {step}.', file=sys.stderr)


def run() -> None:
  """The `transformer-predict` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
