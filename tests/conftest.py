"""Shared test helpers."""

import contextlib
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


@contextlib.contextmanager
def raises_naming(error, *names: str):
  """`pytest.raises(error)` whose message names each of `names` (the field,
  its value, the fix), literally: the words around them are not the
  contract and are free to change."""
  with pytest.raises(error) as caught:
    yield caught
  message = str(caught.value)
  missing = [name for name in names if name not in message]
  assert not missing, f'{missing} not named in: {message}'


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
# A test's tier is the folder it lives in: tests/<room>/e2e/ holds the
# tests that train a model or start a process (`e2e`); the other tests of
# the rooms whose tests put the pieces together (a task over data and a
# model, the trainer and its checkpoints, published checkpoints against
# their reference implementations, the commands, the planner) are
# `integration`; the rest, unless slow, are `unit`: `pytest -m unit` runs
# the properties of the library's parts alone. A test outside an e2e
# folder that starts a process or a training loop fails, naming the folder
# it belongs in.
_INTEGRATION = ('tasks', 'train', 'interop', 'tools', 'trust', 'plan')


def _place(path) -> tuple[str, bool]:
  """(the room of a test file, whether it is in the room's e2e folder)."""
  parts = os.path.relpath(str(path), os.path.join(REPO, 'tests')).split(
      os.sep)
  return parts[0], 'e2e' in parts[1:-1]


def pytest_ignore_collect(collection_path, config):
  """`-m unit` leaves the integration and e2e folders uncollected:
  importing their modules (torch, transformers, TFDS builders) only to
  deselect every test took 5 of the unit tier's seconds in each worker."""
  if config.getoption('markexpr', '').strip() != 'unit':
    return None
  room, e2e = _place(collection_path)
  if e2e or room in _INTEGRATION or collection_path.name == 'e2e':
    return True
  return None


def pytest_collection_modifyitems(config, items):
  del config
  for item in items:
    room, e2e = _place(item.path)
    if e2e:
      item.add_marker(pytest.mark.e2e)
    elif item.get_closest_marker('slow'):
      continue
    elif room in _INTEGRATION:
      item.add_marker(pytest.mark.integration)
    else:
      item.add_marker(pytest.mark.unit)


# The test running now when it is outside an e2e folder (its node id).
_OUTSIDE_E2E = []


def _refuse(what: str):
  if _OUTSIDE_E2E:
    node = _OUTSIDE_E2E[0]
    room = node.split('/')[1] if node.startswith('tests/') else node
    raise AssertionError(
        f'{node} {what} outside an e2e folder: move it to tests/{room}/e2e/')


def pytest_configure(config):
  """Outside e2e folders, starting a process or a training loop fails."""
  import subprocess  # pylint: disable=g-import-not-at-top
  execute_child = subprocess.Popen._execute_child  # pylint: disable=protected-access

  def guarded_execute_child(self, *args, **kwargs):
    _refuse('starts a process')
    return execute_child(self, *args, **kwargs)
  subprocess.Popen._execute_child = guarded_execute_child  # pylint: disable=protected-access
  if config.getoption('markexpr', '').strip() == 'unit':
    return  # no training loop is imported; keep the unit tier's start quick
  from transformer import train  # pylint: disable=g-import-not-at-top
  loop = train._train  # pylint: disable=protected-access

  def guarded_loop(*args, **kwargs):
    _refuse('runs a training loop')
    return loop(*args, **kwargs)
  train._train = guarded_loop  # pylint: disable=protected-access


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del nextitem
  _OUTSIDE_E2E[:] = [] if _place(item.path)[1] else [item.nodeid]
  yield
  _OUTSIDE_E2E[:] = []


# -- Shared by tests/train and tests/train/e2e --------------------------------

# The Slurm launch script: its header is read in test_launch.py, its dry runs
# are in e2e/test_launch_e2e.py.
SLURM_SCRIPT = os.path.join(REPO, 'launch', 'slurm_gpu.sbatch')


@pytest.fixture(scope='module')
def emulator():
  """The URL of a GCS emulator on 127.0.0.1 serving the bucket 'bucket'
  (tests/gcs_emulator.py); skipped with the reason when it is missing or
  cannot start."""
  gcs_emulator = pytest.importorskip(
      'gcs_emulator', reason='needs gcp-storage-emulator (the test extra)')
  try:
    server, url = gcs_emulator.start('bucket')
  except OSError as e:
    pytest.skip(f'the GCS emulator cannot start: {e}')
  yield url
  server.stop()


# -- Shared by tests/trust and tests/trust/e2e --------------------------------

# The names tools/cli.py stages its outputs under.
STAGING = '.writing-'


def fake_workdir(path, task, **data):
  """A workdir with the config of `task` (data fields changed) and nothing
  else: enough for what commands check before they restore a
  checkpoint."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  path.mkdir()
  config = tasks.default_config(task)
  config.data.update(data)
  (path / 'config.json').write_text(config.to_json_best_effort())
  return str(path)


def leftovers(folder):
  """Staging folders and temporary files left anywhere under `folder`."""
  return [os.path.join(root, name) for root, dirs, names in os.walk(folder)
          for name in dirs + names
          if name.startswith(STAGING) or name.endswith('.tmp')]
