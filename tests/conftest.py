"""Shared test helpers."""

import glob
import gzip
import importlib.util
import os
import tempfile

# With libtpu installed (the `tpu` extra, which plans compile with) and no
# TPU attached, jax would try to start a TPU backend in every process and
# log its failure on stderr: tests run on the CPU unless a TPU is there.
if importlib.util.find_spec('libtpu') and not (
    glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*')):
  os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# Test programs are tiny and compile time dominates: skip most of XLA's
# optimisation passes (also in the subprocesses tests start).
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')
# Many tests compile the same tiny programs (the runlocal train steps): a
# persistent compilation cache shared by the workers and the subprocesses
# tests start compiles each once per machine (a cold run of test_train.py
# takes 100 s instead of 125 s, a warm one 66 s). Keyed by the program and
# the jax version, so a stale entry is never used.
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(
    tempfile.gettempdir(), f'transformer-tests-jax-cache-{os.getuid()}'))
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '-1')
# The tests check arithmetic against float64 references at float32
# tolerances. GPUs run float32 matmuls as TF32 by default (a 10-bit
# mantissa): on an H200, 36 attention tests failed by up to 5% relative
# error until matmuls took full float32 precision. No effect on a CPU.
os.environ.setdefault('JAX_DEFAULT_MATMUL_PRECISION', 'highest')

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


def jit_apply():
  """`model.apply` compiled, the model static: from the persistent cache a
  compiled call costs less than an eager one (each eager op compiles)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.jit(lambda model, *args, **kwargs: model.apply(*args, **kwargs),
                 static_argnums=0,
                 static_argnames=('deterministic', 'mutable', 'method'))


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


def tiny_training_config(steps: int = 4):
  """mt_offline:runlocal for `steps` steps, a checkpoint every 2."""
  config = load_experiment('mt_offline', 'runlocal')
  config.train.update(dict(num_steps=steps, checkpoint_every=2,
                           eval_every=100, log_every=2))
  config.eval.num_bleu_examples = 2
  return config


@pytest.fixture(scope='session')
def trained(tmp_path_factory):
  """A finished 4-step run with checkpoints 2 and 4, trained once per test
  process: tests only read it, or change a copy (`copy_of`)."""
  from transformer import train  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp('trained')
  train.train_and_evaluate(tiny_training_config(), str(workdir))
  return workdir


def copy_of(workdir, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  return copy


def prepare_translation_dataset(class_name: str, data_dir: str,
                                splits: dict) -> None:
  """Prepares a tiny TFDS translation dataset (config 'de-en', splits
  {name: [(de, en), ...]}) in `data_dir`, as `tfds build` leaves one; left
  unregistered, so that it is found from its files."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  def info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.Translation(['de', 'en']))

  def split_generators(self, dl_manager):
    del dl_manager
    return {name: self._generate_examples(pairs)
            for name, pairs in splits.items()}

  def generate_examples(self, pairs):
    del self
    for i, (de, en) in enumerate(pairs):
      yield i, {'de': de, 'en': en}

  with tfds.core.registered.skip_registration():
    builder = type(class_name, (tfds.core.GeneratorBasedBuilder,), {
        'VERSION': tfds.core.Version('1.0.0'),
        'BUILDER_CONFIGS': [tfds.core.BuilderConfig(name='de-en')],
        '_info': info, '_split_generators': split_generators,
        '_generate_examples': generate_examples})
  builder(config='de-en', data_dir=data_dir).download_and_prepare()


# -- The tiers: e2e, integration, unit ----------------------------------------
# A test is end to end (`e2e`) when it, a fixture it uses or a helper of
# the test modules it calls (however deep) trains a model or starts a
# process; else `integration` in the folders whose tests put the pieces
# together (a task over data and a model, the trainer and its
# checkpoints, published checkpoints against their reference
# implementations, the commands); else, unless slow, `unit`: `pytest -m
# unit` runs the properties of the library's parts alone.
_INTEGRATION = ('tasks', 'train', 'interop', 'tools', 'trust', 'plan')
_TRAINS = ('train_and_evaluate', 'subprocess.', 'Popen(', 'transformer.main',
           'reproduce(', 'compare.compare(', 'run_benchmark(', 'command(')


def _source(function) -> str:
  import inspect  # pylint: disable=g-import-not-at-top
  try:
    return inspect.getsource(function)
  except (OSError, TypeError):
    return ''


def _called(function, source: str) -> list:
  """The functions of the test modules that `function` calls by name."""
  import ast  # pylint: disable=g-import-not-at-top
  import textwrap  # pylint: disable=g-import-not-at-top
  try:
    tree = ast.parse(textwrap.dedent(source))
  except SyntaxError:
    return []
  names = {node.func.id for node in ast.walk(tree)
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
  found = [getattr(function, '__globals__', {}).get(n) for n in names]
  return [f for f in found if callable(f) and getattr(
      f, '__module__', '').startswith(('test_', 'conftest'))]


def _trains(item) -> bool:
  seen, pending = set(), [item.function]
  for defs in getattr(item, '_fixtureinfo').name2fixturedefs.values():
    pending += [d.func for d in defs]
  while pending:
    function = pending.pop()
    if function in seen:
      continue
    seen.add(function)
    source = _source(function)
    if any(word in source for word in _TRAINS):
      return True
    pending += _called(function, source)
  return False


def pytest_ignore_collect(collection_path, config):
  """`-m unit` leaves the integration folders uncollected: importing their
  modules (torch, transformers, TFDS builders) only to deselect every test
  took 5 of the unit tier's seconds in each worker."""
  if config.getoption('markexpr', '').strip() != 'unit':
    return None
  folder = os.path.relpath(str(collection_path), os.path.join(REPO, 'tests')
                           ).split(os.sep)[0]
  return True if folder in _INTEGRATION else None


def pytest_collection_modifyitems(config, items):
  del config
  for item in items:
    folder = os.path.relpath(str(item.path), os.path.join(REPO, 'tests')
                             ).split(os.sep)[0]
    if hasattr(item, 'function') and _trains(item):
      item.add_marker(pytest.mark.e2e)
    elif item.get_closest_marker('slow'):
      continue
    elif folder in _INTEGRATION:
      item.add_marker(pytest.mark.integration)
    else:
      item.add_marker(pytest.mark.unit)
