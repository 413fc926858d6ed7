"""Entry point: train and evaluate one experiment.

    python -m transformer.main --config=experiments/<name>.py[:arg] \
        --workdir=DIR [--config.train.num_steps=100 ...]

With no flags it runs the default experiment (`experiments/mt_offline.py`)
into DEFAULT_WORKDIR. Exit codes are those of `tools/cli.py` (75: preempted
after a checkpoint, rerun to resume). The other commands are in
`transformer/tools/`.
"""

import os
import signal
import shlex
import shutil
import sys


def _interrupted(signum, frame) -> None:
  """Ctrl-C outside the training loop (loading libraries, building the
  task, restoring; training's own handler checkpoints on it): one line and
  exit code 130, not a KeyboardInterrupt traceback."""
  del frame
  print(f'Interrupted ({signal.Signals(signum).name}) outside the training '
        f'steps: nothing was trained since the last checkpoint; rerun the '
        f'same command to resume.', file=sys.stderr, flush=True)
  sys.exit(128 + signum)


if __name__ == '__main__':  # before the libraries load, which takes seconds
  signal.signal(signal.SIGINT, _interrupted)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from transformer import checkpoints
from transformer import configs
from transformer import storage
from transformer import tasks
from transformer import train
from transformer import workdir as workdir_lib
from transformer.tools import cli
# pylint: enable=g-import-not-at-top,wrong-import-position

DEFAULT_CONFIG = os.path.join(configs.EXPERIMENTS, 'mt_offline.py')
DEFAULT_WORKDIR = os.path.join('workdirs', 'mt_offline')

_CONFIG = config_flags.DEFINE_config_file(
    'config', DEFAULT_CONFIG, 'Experiment config file.', lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, f'Where checkpoints, logs, vocabulary and reports go; '
    f'default {DEFAULT_WORKDIR} for the default experiment.')


def _multi_process() -> bool:
  """Whether this process is one of several (a pod slice, SLURM tasks, or an
  explicit coordinator), which `jax.distributed.initialize` then joins."""
  return bool(os.environ.get('JAX_COORDINATOR_ADDRESS')
              or int(os.environ.get('SLURM_NTASKS', '1')) > 1
              or ',' in os.environ.get('TPU_WORKER_HOSTNAMES', ''))


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  return int(value) if value else None


def _workdir() -> str:
  workdir = _WORKDIR.value
  if workdir is not None and not workdir.strip():
    # It would be the current directory, and every file would land there.
    raise ValueError('--workdir is empty: give the folder the run writes '
                     'into, e.g. --workdir=workdirs/NAME.')
  if workdir is None:
    if flags.FLAGS['config'].present:
      raise ValueError('Give --workdir=DIR for a --config experiment.')
    workdir = DEFAULT_WORKDIR
    print(f'No flags: running the default experiment {DEFAULT_CONFIG} into '
          f'{os.path.abspath(DEFAULT_WORKDIR)}', flush=True)
  if storage.is_remote(workdir):
    storage.check_remote(workdir)
  return workdir


def main(argv):
  cli.no_arguments(argv)
  workdir = _workdir()
  # A refused config or workdir leaves nothing behind, not even a log.
  train.check_config(_CONFIG.value)
  tasks.check_data_fields(_CONFIG.value, config_flags.get_override_values(
      flags.FLAGS['config']))
  train.check_start(_CONFIG.value, workdir)
  workdir_lib.check_layout(workdir)
  if _multi_process():
    # CPU processes (tests, laptops) exchange data over gloo; GPUs and TPUs
    # use their own collectives and ignore this.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    # SLURM and TPU pods are detected by jax; an explicit launch (e.g.
    # launch/local.sh --processes=N) names the count and id.
    jax.distributed.initialize(num_processes=_env_int('JAX_NUM_PROCESSES'),
                               process_id=_env_int('JAX_PROCESS_ID'))
  name = 'train.log' if jax.process_index() == 0 else (
      f'train.{jax.process_index()}.log')
  # A log file is written locally; a workdir on cloud storage gets a copy
  # when the run ends, however it ends.
  logs = storage.join(workdir, 'logs')
  cli.log_to_file(os.path.join(storage.local_mirror(logs), name))
  logging.info('JAX devices: %s', jax.devices())
  try:
    result = train.train_and_evaluate(_CONFIG.value, workdir)
  finally:
    if storage.is_remote(logs):
      storage.upload(storage.local_mirror(logs), logs, prefix=name)
  print('Final evaluation: ' + '  '.join(
      f'{k} {v:.4g}' for k, v in sorted(result.items())))
  workdir = os.fspath(storage.path(workdir))
  print(f'Checkpoints: {checkpoints.directory(workdir)}\n'
        f'TensorBoard: {tensorboard_command(workdir)}\n'
        f'Reports and plots: {workdir}/reports, {workdir}/plots\n'
        f'Log: {storage.join(workdir, "logs")}')


def tensorboard_command(workdir: str) -> str:
  """The command that shows the run's logs; where the viewer is not
  installed (an environment without it on PATH), how to get it first."""
  command = f'tensorboard --logdir={shlex.quote(workdir)}'
  if shutil.which('tensorboard'):
    return command
  return f'pip install tensorboard, then {command}'


def run() -> None:
  """The `transformer-train` console script."""
  signal.signal(signal.SIGINT, _interrupted)
  cli.run(main)


if __name__ == '__main__':
  run()
