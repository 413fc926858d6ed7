"""Entry point: train and evaluate one experiment.

    python -m transformer.main --config=experiments/<name>.py[:arg] \
        --workdir=DIR [--config.train.num_steps=100 ...]

With no flags it runs the default experiment (`experiments/mt_offline.py`)
into DEFAULT_WORKDIR. This is the only training module that defines flags.
"""

import os

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from transformer import train

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'experiments', 'mt_offline.py')
DEFAULT_WORKDIR = os.path.join('workdirs', 'mt_offline')

_CONFIG = config_flags.DEFINE_config_file(
    'config', DEFAULT_CONFIG, 'Experiment config file.', lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, f'Where checkpoints, logs, vocabulary and reports go; '
    f'default {DEFAULT_WORKDIR} for the default experiment.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  workdir = _WORKDIR.value
  if workdir is None:
    if flags.FLAGS['config'].present:
      raise app.UsageError('Give --workdir=DIR for a --config experiment.')
    workdir = DEFAULT_WORKDIR
    print(f'No flags: running the default experiment {DEFAULT_CONFIG} into '
          f'{os.path.abspath(workdir)}', flush=True)
  # Multi-process runs (several hosts, or several processes per host) are
  # joined here; a single process needs nothing.
  if int(os.environ.get('JAX_NUM_PROCESSES', '1')) > 1:
    jax.distributed.initialize()
  logging.info('JAX devices: %s', jax.devices())
  result = train.train_and_evaluate(_CONFIG.value, workdir)
  print('Final evaluation: ' + '  '.join(
      f'{k} {v:.4g}' for k, v in sorted(result.items())))
  print(f'Checkpoints: {os.path.join(os.path.abspath(workdir), "checkpoints")}'
        f'\nTensorBoard: tensorboard --logdir={os.path.abspath(workdir)}'
        f'\nReports and plots: {os.path.abspath(workdir)}/reports, '
        f'{os.path.abspath(workdir)}/plots')


if __name__ == '__main__':
  app.run(main)
