"""Shared test helpers."""

import gzip
import os

# Test programs are tiny and compile time dominates: skip most of XLA's
# optimisation passes (also in the subprocesses tests start).
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_experiment(name: str, arg: str = ''):
  """`get_config(arg)` of experiments/<name>.py, as --config loads it."""
  from transformer import configs  # pylint: disable=g-import-not-at-top
  return configs.load_experiment(
      os.path.join(REPO, 'experiments', f'{name}.py') + (f':{arg}' if arg
                                                         else ''))


def convert_and_restore(published_dir: str, workdir: str):
  """`interop.workdirs.convert` of a published Hugging Face directory, then
  (the workdir restored at checkpoint 0, its parameters, the workdir)."""
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  workdirs.convert('hf', published_dir, workdir)
  restored = workdir_lib.restore(workdir)
  assert restored.step == 0
  return restored, restored.params, workdir


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
