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


def randomised(model, seed: int = 0, std: float = 0.2):
  """A torch reference model (returned, in eval mode) with every trainable
  parameter and its final logits bias, where it has one, drawn from
  N(0, std^2): the default initialisation, with LayerNorm scales of 1 and
  zero biases, lets mapping mistakes cancel out. Fixed tables (Marian's
  sinusoids) are kept."""
  import torch  # pylint: disable=g-import-not-at-top
  generator = torch.Generator().manual_seed(seed)
  tensors = [t for _, t in model.named_parameters() if t.requires_grad]
  tensors += [t for name, t in model.named_buffers()
              if name.endswith('final_logits_bias')]
  with torch.no_grad():
    for tensor in tensors:
      torch.nn.init.normal_(tensor, std=std, generator=generator)
  return model.eval()


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
