"""Classify image files with a trained image-classification workdir.

    python -m transformer.predict --workdir=workdirs/vit_offline cat.png dog.jpg
    python -m transformer.predict --workdir=DIR --top_k=3 \
        --attention_dir=maps/ images/*.png

Each image is read (RGB or grey, as the model was trained), its shorter
side resized to the training's stored size and the centre cropped to the
model's input size, as in evaluation. Prints the top-k classes with their
probabilities; with --attention_dir also writes, per image, the class
token's attention over the patches (last layer's heads and the rollout).
"""

import os
import sys

from absl import app
from absl import flags
import numpy as np

from transformer import commands
from transformer import sharding
from transformer import train
from transformer.data import images as image_data

_WORKDIR = flags.DEFINE_string('workdir', None, 'An image-classification '
                               'workdir.', required=True)
_TOP_K = flags.DEFINE_integer('top_k', 5, 'Classes to print per image.')
_ATTENTION_DIR = flags.DEFINE_string('attention_dir', None, 'Write attention '
                                     'maps (PNG) here.')
_AVERAGE = flags.DEFINE_integer('average', 1,
                                'Average the last N checkpoints.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Images per batch.')


@commands.user_errors_exit
def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError('Give image files to classify after the flags.')
  missing = [p for p in paths if not os.path.isfile(p)]
  if missing:
    raise app.UsageError(f'No such files: {missing}')
  config = train.load_config(_WORKDIR.value)
  if config.task != 'image_classification':
    raise app.UsageError(f'{_WORKDIR.value} trained a {config.task!r} task; '
                         f'predict needs an image classifier.')
  trainer = train.Trainer(config, _WORKDIR.value)
  task = trainer.task
  if _ATTENTION_DIR.value and task.model_config.pooling != 'token':
    raise app.UsageError('--attention_dir shows the class token\'s attention; '
                         'this model pools with "gap" and has none.')
  params, step = trainer.restore_params(_AVERAGE.value)
  size = config.data.load_size or config.data.image_size
  top_k = min(_TOP_K.value, len(task.class_names))
  with sharding.active(trainer.mesh, trainer.rules):
    for begin in range(0, len(paths), _BATCH_SIZE.value):
      batch = paths[begin:begin + _BATCH_SIZE.value]
      pictures = np.stack([image_data.read_image(p, size, task.num_channels)
                           for p in batch])
      probabilities = task.predict(params, pictures)
      for path, picture, row in zip(batch, pictures, probabilities):
        best = np.argsort(-row)[:top_k]
        sys.stdout.write(path + '\t' + '  '.join(
            f'{task.class_names[i]} {row[i]:.3f}' for i in best) + '\n')
        if _ATTENTION_DIR.value:
          name = os.path.splitext(os.path.basename(path))[0]
          task.plot_attention(params, picture, os.path.join(
              _ATTENTION_DIR.value, f'{name}_attention.png'))
  print(f'Classified with the checkpoint of step {step}.', file=sys.stderr)


if __name__ == '__main__':
  app.run(main)
