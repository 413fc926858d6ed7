"""Shared test helpers."""

import gzip
import importlib.util
import os

# Test programs are tiny and compile time dominates: skip most of XLA's
# optimisation passes (also in the subprocesses tests start).
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_experiment(name: str, arg: str = ''):
  """`get_config(arg)` of experiments/<name>.py, as config_flags loads it."""
  path = os.path.join(REPO, 'experiments', f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'experiment_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def convert_and_restore(published_dir: str, workdir: str):
  """`python -m transformer.convert --from=hf` of a published directory,
  then the workdir's trainer and restored parameters (checkpoint 0)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.convert', '--from=hf',
       f'--input={published_dir}', f'--output={workdir}'],
      capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  trainer = train.Trainer(train.load_config(workdir), workdir)
  params, step = trainer.restore_params(1)
  assert step == 0
  return trainer, params, workdir


@pytest.fixture
def experiment():
  return load_experiment


def write_idx(path, array):
  """An MNIST-style idx file (gzipped) of unsigned bytes."""
  header = bytes([0, 0, 8, array.ndim]) + b''.join(
      int(n).to_bytes(4, 'big') for n in array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def write_mnist(folder, train: int, test: int, side: int = 28, seed: int = 0):
  """Random digits in MNIST's four idx files: labels 0..9 in turn."""
  rng = np.random.default_rng(seed)
  for prefix, count in (('train', train), ('t10k', test)):
    write_idx(os.path.join(folder, f'{prefix}-images-idx3-ubyte.gz'),
              rng.integers(0, 256, (count, side, side)))
    write_idx(os.path.join(folder, f'{prefix}-labels-idx1-ubyte.gz'),
              np.arange(count) % 10)
