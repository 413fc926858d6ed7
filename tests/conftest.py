"""Shared test helpers."""

import contextlib
import glob
import gzip
import importlib.util
import json
import os
import sys
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

try:  # the fuzzing tests' draws: the same on every run, and nothing saved
  import hypothesis  # pylint: disable=g-import-not-at-top
  hypothesis.settings.register_profile('repeatable', derandomize=True,
                                       database=None, deadline=None)
  hypothesis.settings.load_profile('repeatable')
except ImportError:  # the tests that fuzz need the test extra
  pass

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


def convert_command(*flags):
  """`python -m transformer.tools.convert` with `flags`, in a process of
  its own (e2e tests): its CompletedProcess, output captured."""
  import subprocess  # pylint: disable=g-import-not-at-top
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.convert', *map(str, flags)],
      capture_output=True, text=True, check=False)


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


@pytest.fixture(scope='module')
def gcs_emulator_url():
  """The URL of a GCS emulator holding an empty 'bucket', in a thread of
  this process (skipped, saying why, where it is missing or cannot
  start)."""
  emulator = pytest.importorskip(
      'gcs_emulator', reason='needs gcp-storage-emulator (the test extra)')
  try:
    server, url = emulator.start('bucket')
  except OSError as e:
    pytest.skip(f'the GCS emulator cannot start: {e}')
  yield url
  server.stop()


@pytest.fixture
def gcs_in_process(gcs_emulator_url, monkeypatch):
  """This process talking to the emulator (epath's choice of backend is
  cached per process: cleared so that gcsfs serves gs://)."""
  pytest.importorskip('gcsfs')
  import gcs_emulator  # pylint: disable=g-import-not-at-top
  from etils.epath import gpath  # pylint: disable=g-import-not-at-top
  for name, value in gcs_emulator.environment(gcs_emulator_url).items():
    monkeypatch.setenv(name, value)
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
  yield gcs_emulator_url
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access


# -- The tiers: e2e, integration, unit ----------------------------------------
# A test's tier is the folder it lives in: tests/<room>/e2e/ holds the
# tests that train a model or start a process (`e2e`); the other tests of
# the rooms whose tests put the pieces together (a task over data and a
# model, the trainer and its checkpoints, published checkpoints against
# their reference implementations, the commands, the planner, the
# documentation's recipes run against the code) are `integration`; the
# rest, unless slow, are `unit`: `pytest -m unit` runs the properties of
# the library's parts alone. A test outside an e2e
# folder that starts a process or a training loop fails, naming the folder
# it belongs in.
_INTEGRATION = ('tasks', 'train', 'interop', 'tools', 'trust', 'plan', 'docs')


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


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
  """The unit tier's workers steal each other's tests. Its files are many
  and short, and whole files per worker (pytest.ini's `--dist loadfile`)
  left one worker idle at the end: 57 to 66 s against 53 to 59 s stealing
  (3 runs each, 2 cores). The other tiers keep a file to one worker, so
  that a module's fixtures (a trained workdir) are built once."""
  if (config.getoption('markexpr', '').strip() != 'unit'
      or config.getvalue('dist') != 'loadfile'):
    return None
  from xdist import scheduler  # pylint: disable=g-import-not-at-top
  return scheduler.WorkStealingScheduling(config, log)


# The test running now when it is outside an e2e folder (its node id).
_OUTSIDE_E2E = []


def _refuse(what: str):
  if _OUTSIDE_E2E:
    node = _OUTSIDE_E2E[0]
    parts = node.split('::')[0].split('/')
    folder = (f'tests/{parts[1]}/e2e/' if len(parts) > 2 else
              "the e2e/ folder of the room it tests")
    raise AssertionError(
        f'{node} {what} outside an e2e folder: move it to {folder}')


def pytest_configure(config):
  """Outside e2e folders, starting a process or a training loop fails."""
  if (config.getoption('numprocesses', None)
      and not hasattr(config, 'workerinput')):
    return  # pytest-xdist's controller runs no test
  import platform  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  # Importing TensorFlow asks `platform.processor()`, which runs `uname -p`
  # once a process: asked here, before the guard, it is not taken for a
  # test starting a process.
  platform.processor()
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


def _leave_now():
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """An xdist worker whose results are sent leaves at once: jax's exit
  handler clears every compiled program's cache one by one, 2 to 3 s per
  worker after the last test, which the controller waits for."""
  if hasattr(config, 'workerinput'):
    import atexit  # pylint: disable=g-import-not-at-top
    atexit.register(_leave_now)  # the last registered runs first


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del nextitem
  _OUTSIDE_E2E[:] = [] if _place(item.path)[1] else [item.nodeid]
  yield
  _OUTSIDE_E2E[:] = []


# -- Shared by tests/data and tests/data/e2e ----------------------------------
# The real datasets, where a machine keeps them next to the checkout.
SHARED_DATA = os.path.join(REPO, '..', 'shared', 'data')


@pytest.fixture()
def server(tmp_path):
  """(base URL, folder served): an HTTP server on loopback."""
  import functools  # pylint: disable=g-import-not-at-top
  import http.server  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  folder = tmp_path / 'served'
  folder.mkdir()
  handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                              directory=str(folder))
  handler.log_message = lambda *args: None
  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
  # `shutdown` waits for the next poll: 0.5 s by default, per test.
  thread = threading.Thread(target=httpd.serve_forever, args=(0.02,),
                            daemon=True)
  thread.start()
  yield f'http://127.0.0.1:{httpd.server_address[1]}', folder
  httpd.shutdown()
  httpd.server_close()


# -- Shared by tests/insight and tests/insight/e2e ----------------------------
# Text that ends or re-opens the inlined script, comments, quotes, the
# page's own placeholders, entities, emoji, right-to-left text (with an
# override mark) and JavaScript's line terminators.
HOSTILE = ['</script>', '<!--<script>', '</SCRIPT >', '<!--', '-->',
           '"\'`', '&amp;', '<img src=x onerror=alert(1)>', '/*DATA*/',
           '/*SCRIPT*/', '<!--FORM-->', '\\u003c', '😀👩‍🔬', 'שלום עולם',
           '\u202eevil', 'a\u2028b\u2029c']


@pytest.fixture(scope='module')
def hostile(tmp_path_factory):
  """A page whose title, input, view name and tokens are all hostile."""
  from transformer.insight import attention_views  # pylint: disable=g-import-not-at-top
  from transformer.tools import explore  # pylint: disable=g-import-not-at-top
  n = len(HOSTILE)
  weights = np.random.default_rng(0).random((1, 2, n, n))
  weights /= weights.sum(-1, keepdims=True)
  view = attention_views.AttentionView(name=' '.join(HOSTILE), queries=HOSTILE,
                            keys=HOSTILE[::-1], weights=weights)
  path = tmp_path_factory.mktemp('hostile') / 'page.html'
  path.write_text(explore.page('<!--<script> ' + HOSTILE[-1], ''.join(HOSTILE),
                               [view]), encoding='utf-8')
  return path, view


# `explore --serve` in a thread, and requests to it (tests import them under
# their old names: serve, get, request, multipart).
def explorer_serve(explorer, *args) -> tuple[str, int]:
  import threading  # pylint: disable=g-import-not-at-top
  from transformer.tools import explorer_server  # pylint: disable=g-import-not-at-top
  server = explorer_server.make_server(explorer, 0, *args)
  threading.Thread(target=server.serve_forever, args=(0.02,),
                   daemon=True).start()
  return server, server.server_address[1]


def explorer_get(url: str) -> tuple[int, str]:
  import urllib.error  # pylint: disable=g-import-not-at-top
  import urllib.request  # pylint: disable=g-import-not-at-top
  try:
    with urllib.request.urlopen(url, timeout=60) as response:
      return response.status, response.read().decode('utf-8')
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode('utf-8')


def explorer_request(url: str, method: str = 'GET', path: str = '/',
                     host: str | None = None, body: bytes | None = None,
                     headers: dict | None = None) -> tuple[int, str]:
  """One request with the Host header `host` (None: no Host header)."""
  import http.client  # pylint: disable=g-import-not-at-top
  import urllib.parse  # pylint: disable=g-import-not-at-top
  connection = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc,
                                          timeout=60)
  connection.putrequest(method, path, skip_host=True)
  for name, value in ({} if host is None else {'Host': host}
                      ).items() | (headers or {}).items():
    connection.putheader(name, value)
  if body is not None:
    connection.putheader('Content-Length', str(len(body)))
  connection.endheaders(body)
  response = connection.getresponse()
  answer = response.status, response.read().decode('utf-8')
  connection.close()
  return answer


def explorer_multipart(fields: dict) -> tuple[bytes, dict]:
  """A form's body as a browser sends it: {name: text or (file name,
  bytes)}; and its Content-Type header."""
  boundary = 'XyZzYboundary'
  parts = []
  for name, value in fields.items():
    if isinstance(value, tuple):
      head = (f'Content-Disposition: form-data; name="{name}"; filename='
              f'"{value[0]}"\r\nContent-Type: application/octet-stream')
      content = value[1]
    else:
      head = f'Content-Disposition: form-data; name="{name}"'
      content = value.encode('utf-8')
    parts.append(f'--{boundary}\r\n{head}\r\n\r\n'.encode() + content
                 + b'\r\n')
  body = b''.join(parts) + f'--{boundary}--\r\n'.encode()
  return body, {'Content-Type': f'multipart/form-data; boundary={boundary}'}


# -- Shared by tests/tools and tests/tools/e2e
TABLE3 = os.path.join(REPO, 'experiments', 'paper', 'vaswani2017_table3.py')

# Two tiny rows that train, one whose config the trainer refuses (a failed
# row), one that sets a field the config does not have.
TINY_SPEC = """
from transformer.reproduce.specs import Column, Row, Scale

TITLE = 'Tiny table'
SCALES = {'paper': Scale('experiments/mt_offline.py:runlocal', 'tiny offline',
                         {'train.num_steps': 4, 'train.eval_every': 4,
                          'train.checkpoint_every': 4, 'train.log_every': 2,
                          'data.num_train': 300, 'data.num_test': 4,
                          'data.vocab_size': 100})}
COLUMNS = (Column('h', 'h', 'setting:h'),
           Column('ppl', 'PPL', 'metric:eval/perplexity', paper=True),
           Column('bleu', 'BLEU', 'metric:eval/bleu', paper=True),
           Column('params', 'params', 'params', digits=4, paper=True))
ROWS = (Row('base', 'base', 'base', {'paper': {}},
            dict(ppl='9.99', bleu='1.0', params=1)),
        Row('h2', 'A', 'h=2', {'paper': {'model.num_heads': 2}},
            dict(ppl='8.88')),
        Row('broken', 'A', 'no checkpoints',
            {'paper': {'train.keep_checkpoints': 0}}),
        Row('novel', 'B', 'a new field', {'paper': {'model.no_such': 1}}))
NOTES = 'Tiny notes.'
"""


@pytest.fixture(scope='module')
def spec_path(tmp_path_factory):
  """TINY_SPEC as a table spec file (tests/tools' reproduce tests)."""
  path = tmp_path_factory.mktemp('spec') / 'tiny_table.py'
  path.write_text(TINY_SPEC)
  return str(path)


def _parsed(words):
  """The config that transformer.main would build from these flags."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  argv = [w for w in words if w.startswith('--config')]
  values = flags.FlagValues()
  # config_flags registers the override flags of the command line it is
  # given at definition time.
  config_flags.DEFINE_config_file('config', None, flag_values=values,
                                  lock_config=True, sys_argv=['main', *argv])
  values(['main', *argv])
  return values.config


# A PNG file's first bytes (the curves command's figures).
PNG = b'\x89PNG'


def write_run(workdir, scalars):
  """One event file of {step: {tag: value}} in `workdir`, as training
  writes them."""
  from transformer import metrics  # pylint: disable=g-import-not-at-top
  writer = metrics.MetricWriter(str(workdir))
  for step, values in scalars.items():
    writer.write_scalars(step, values)
  writer.close()


@pytest.fixture(name='two_runs')
def fixture_two_runs(tmp_path):
  """Two runs' workdirs (the curves command's tests), the first resumed."""
  first, second = tmp_path / 'seed0', tmp_path / 'seed1'
  write_run(first, {100: {'train/loss': 5.0},
                    200: {'train/loss': 4.0, 'eval/bleu': 30.0}})
  write_run(first, {300: {'train/loss': 3.0, 'eval/bleu': 33.0,
                          'eval_averaged/bleu': 35.0}})
  write_run(second, {100: {'train/loss': 6.0}, 300: {'train/loss': 2.0,
                                                     'eval/bleu': 37.0}})
  return [str(first), str(second)]


# -- Shared by tests/tasks and tests/tasks/e2e

def captions_read_under_mock_tfds(config, monkeypatch) -> dict:
  """The caption splits of `config` read under TFDS's mock data (8 images
  each), and `sources.read` answering with them: training then runs
  outside the mock, which also redirects the file calls of orbax's
  checkpoint writer."""
  tfds = pytest.importorskip('tensorflow_datasets')
  from transformer.data import sources  # pylint: disable=g-import-not-at-top
  with tfds.testing.mock_data(num_examples=8):
    splits = {split: sources.read('captions', config.data, split)
              for split in (config.data.train_split, config.data.eval_split)}
  monkeypatch.setattr(sources, 'read', lambda kind, data, split: splits[split])
  return splits

GLUE_FILES = {
    'cola': ('gj04\t1\t\tOur friends will not buy this round .\n'
             'gj04\t0\t*\tThey drank the pub .\n', None),
    'sst2': ('sentence\tlabel\na gripping tale \t1\ndull\t0\n', None),
    'mrpc': ('Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
             '1\t702876\t702977\tHe said so .\tSo he said .\n', 'So he said .'),
    'qqp': ('id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n'
            '5\t11\t12\tWhy?\tHow?\t0\n6\t13\tcut short\n', 'How?'),
    'stsb': ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t'
             'sentence1\tsentence2\tscore\n0\tmain-captions\tMSRvid\t2012test'
             '\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is '
             'taking off.\t5.000\n', 'An air plane is taking off.'),
    'mnli': ('index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t'
             'sentence2_binary_parse\tsentence1_parse\tsentence2_parse\t'
             'sentence1\tsentence2\tlabel1\tgold_label\n0\t1\t1n\tgov\t( x )'
             '\t( y )\t(ROOT x)\t(ROOT y)\tIt rains.\tIt is wet.\tneutral\t'
             'contradiction\n', 'It is wet.'),
    'qnli': ('index\tquestion\tsentence\tlabel\n0\tWho?\tHe did.\t'
             'not_entailment\n', 'He did.'),
    'rte': ('index\tsentence1\tsentence2\tlabel\n0\tA cat.\tAn animal.\t'
            'entailment\n', 'An animal.'),
    'wnli': ('index\tsentence1\tsentence2\tlabel\n0\tI saw it.\tIt saw.\t1\n',
             'It saw.'),
}


@pytest.fixture(scope='module')
def converted_bert(tmp_path_factory):
  """A tiny BERT of ours written in the Hugging Face layout with a
  WordPiece tokenizer.json, converted as a published checkpoint is."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  tokenizers_lib = pytest.importorskip('tokenizers')
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  from transformer.interop import bert  # pylint: disable=g-import-not-at-top
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  from transformer.models import encoder  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('published')
  wordpiece = tokenizers_lib.BertWordPieceTokenizer(lowercase=True)
  wordpiece.train_from_iterator(text.offline_splits(100, 10, seed=0)['train'],
                                vocab_size=200, show_progress=False)
  wordpiece.save(str(root / 'tokenizer.json'))
  config = encoder.config_for('tiny', vocab_size=wordpiece.get_vocab_size(),
                              max_length=512)
  params = nn.unbox(encoder.Bert(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32), deterministic=True,
      method='mlm_logits')['params'])
  bert.save_hf(str(root), params, config)
  workdir = str(tmp_path_factory.mktemp('workdirs') / 'minilm')
  workdirs.convert('hf', str(root), workdir)
  return workdir


def _glue_data(root, rows: int):
  """glue_data/RTE as GLUE's download lays it out, `rows` training pairs."""
  folder = root / 'glue_data' / 'RTE'
  folder.mkdir(parents=True)
  lines = ''.join(f'{i}\tA cat sat.\tAn animal sat.\tentailment\n'
                  for i in range(rows))
  for split in ('train', 'dev'):
    (folder / f'{split}.tsv').write_text(
        'index\tsentence1\tsentence2\tlabel\n' + lines)


# -- Shared by tests/interop and tests/interop/e2e
# Prompts of the converted GPT-2 and Llama workdirs, texts of the Llama one,
# sentences of the Marian one (imported under the modules' own names).
PROMPTS = ['the dog', 'A cat sees the red house.']
LLAMA_TEXTS = PROMPTS + ['naïve ✓ text\n', 'two  spaces\n\nend', '']
MARIAN_SENTENCES = ['the red house is big', 'a small cat sees the dog',
                    'the dogs walk to the green park', 'zebra quilts?']


# Llama 2's tokenizer_config.json, as transformers reads it.
LLAMA_TOKENIZER_CONFIG = {'tokenizer_class': 'LlamaTokenizer',
                    'add_bos_token': True, 'add_eos_token': False,
                    'bos_token': '<s>', 'eos_token': '</s>',
                    'unk_token': '<unk>', 'legacy': False}
LLAMA_MODEL = dict(vocab_size=300, hidden_size=32, intermediate_size=48,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, rms_norm_eps=1e-5,
             tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
             rope_theta=500_000.0,
             rope_scaling={'rope_type': 'llama3', 'factor': 8.0,
                           'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                           'original_max_position_embeddings': 16})


def llama_sentencepiece_model() -> bytes:
  """A 300-piece SentencePiece BPE model with byte fallback, trained as
  Llama's: <unk> 0, <s> 1, </s> 2, a dummy space before each text."""
  import io  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(text.offline_splits(200, 10, seed=0)['train']),
      model_writer=model, vocab_size=300, model_type='bpe',
      byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
      character_coverage=1.0, remove_extra_whitespaces=False,
      normalization_rule_name='identity', minloglevel=2)
  return model.getvalue()


def _llama2_tokenizer_json(directory, transformers) -> None:
  """tokenizer.json as Llama 2 publishes it (transformers 4's conversion
  of its SentencePiece model, 'legacy'): '▁' prepended to the text and for
  every space, BPE with byte fallback, <s> added in front. transformers 5
  saves another pre-tokenizer, so the fields are set here."""
  import shutil  # pylint: disable=g-import-not-at-top
  folder = directory / 'saved'
  transformers.AutoTokenizer.from_pretrained(directory).save_pretrained(
      folder)
  published = json.loads((folder / 'tokenizer.json').read_text())
  published['normalizer'] = {'type': 'Sequence', 'normalizers': [
      {'type': 'Prepend', 'prepend': '▁'},
      {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '▁'}]}
  published['pre_tokenizer'] = None
  published['model']['unk_token'] = '<unk>'
  (directory / 'tokenizer.json').write_text(
      json.dumps(published, ensure_ascii=False))
  shutil.rmtree(folder)


def publish_llama(directory, kind: str):
  """A Llama directory with its vocabulary as `kind` ('tokenizer.json' or
  'tokenizer.model'); (model, transformers' tokenizer, the directory)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  (directory / 'tokenizer.model').write_bytes(llama_sentencepiece_model())
  (directory / 'tokenizer_config.json').write_text(
      json.dumps(LLAMA_TOKENIZER_CONFIG))
  if kind == 'tokenizer.json':
    _llama2_tokenizer_json(directory, transformers)
    (directory / 'tokenizer.model').unlink()
  torch.manual_seed(0)
  model = randomised(transformers.LlamaForCausalLM(
      transformers.LlamaConfig(**LLAMA_MODEL)))
  model.save_pretrained(directory)
  return (model, transformers.AutoTokenizer.from_pretrained(directory),
          str(directory))


def published_and_converted(publish):
  """The module fixtures `published` (what `publish(tmp_path_factory)`
  writes: (..., its directory)) and `converted` (that directory converted
  and restored, `convert_and_restore`) of a converter's test module."""
  @pytest.fixture(scope='module', name='published')
  def published(tmp_path_factory):
    return publish(tmp_path_factory)

  @pytest.fixture(scope='module', name='converted')
  def converted(published, tmp_path_factory):
    return convert_and_restore(
        published[-1], str(tmp_path_factory.mktemp('converted') / 'workdir'))
  return published, converted


def publish_gpt2(tmp_path_factory):
  """A GPT-2 directory: weights, config, vocab.json and merges.txt with
  <|endoftext|> as the last id, as GPT-2 has it; (model, transformers'
  tokenizer, the directory)."""
  import json  # pylint: disable=g-import-not-at-top
  import tokenizers as tokenizers_lib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp('gpt2')
  documents = text.offline_splits(200, 10, seed=0)['train']
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(documents, vocab_size=400, min_frequency=2,
                          show_progress=False)
  bpe.save_model(str(directory))
  with open(directory / 'vocab.json') as f:
    vocab = json.load(f)
  vocab['<|endoftext|>'] = len(vocab)
  with open(directory / 'vocab.json', 'w') as f:
    json.dump(vocab, f)
  config = transformers.GPT2Config(
      vocab_size=len(vocab), n_positions=64, n_embd=32, n_layer=2, n_head=4,
      bos_token_id=len(vocab) - 1, eos_token_id=len(vocab) - 1)
  torch.manual_seed(0)
  model = randomised(transformers.GPT2LMHeadModel(config))
  model.save_pretrained(directory)
  tokenizer = transformers.GPT2Tokenizer(str(directory / 'vocab.json'),
                                         str(directory / 'merges.txt'))
  return model, tokenizer, str(directory)


def _train_spm(path, sentences, vocab_size):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_prefix=str(path),
      vocab_size=vocab_size, model_type='unigram', hard_vocab_limit=False,
      character_coverage=1.0, minloglevel=2)
  os.rename(f'{path}.model', path)


def publish_marian(tmp_path_factory):
  """An OPUS-MT-shaped directory: weights, config, spm models, vocab.json
  (EOS 0, unknown 1, padding last, as Marian numbers them); (model, the
  directory)."""
  import json  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformer.data.generated import offline_mt  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp('opus_mt')
  pairs = offline_mt.splits(300, 10, 10, seed=0)['train']
  _train_spm(directory / 'source.spm', [s for s, _ in pairs], 120)
  _train_spm(directory / 'target.spm', [t for _, t in pairs], 120)
  pieces = []
  for name in ('source.spm', 'target.spm'):
    model = spm.SentencePieceProcessor(model_file=str(directory / name))
    pieces += [model.id_to_piece(i) for i in range(model.vocab_size())
               if not model.is_control(i) and not model.is_unknown(i)]
  pieces = ['</s>', '<unk>'] + sorted(set(pieces)) + ['<pad>']
  with open(directory / 'vocab.json', 'w') as f:
    json.dump({p: i for i, p in enumerate(pieces)}, f)
  with open(directory / 'tokenizer_config.json', 'w') as f:
    json.dump({'source_lang': 'en', 'target_lang': 'es'}, f)
  size = len(pieces)
  config = transformers.MarianConfig(
      vocab_size=size, decoder_vocab_size=size, d_model=32, encoder_layers=2,
      decoder_layers=2, encoder_attention_heads=4,
      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
      max_position_embeddings=64, activation_function='swish',
      scale_embedding=True, pad_token_id=size - 1, eos_token_id=0,
      decoder_start_token_id=size - 1, forced_eos_token_id=None)
  torch.manual_seed(0)
  model = randomised(transformers.MarianMTModel(config))
  model.save_pretrained(directory)
  return model, str(directory)


def publish_bert(tmp_path_factory):
  """A BERT directory with a WordPiece vocab.txt; (model, transformers'
  tokenizer, the directory)."""
  import tokenizers as tokenizers_lib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp('bert')
  wordpiece = tokenizers_lib.BertWordPieceTokenizer(lowercase=True)
  wordpiece.train_from_iterator(text.offline_splits(200, 10, seed=0)['train'],
                                vocab_size=300, show_progress=False)
  wordpiece.save_model(str(directory))  # vocab.txt, [PAD] [UNK] [CLS] ...
  size = wordpiece.get_vocab_size()
  config = transformers.BertConfig(
      vocab_size=size, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=4, intermediate_size=64,
      max_position_embeddings=32)
  torch.manual_seed(0)
  model = randomised(transformers.BertForPreTraining(config))
  model.save_pretrained(directory)
  tokenizer = transformers.BertTokenizer(str(directory / 'vocab.txt'))
  return model, tokenizer, str(directory)


# -- Shared by tests/train and tests/train/e2e --------------------------------

# The Slurm launch script: its header is read in test_launch.py, its dry runs
# are in e2e/test_launch_e2e.py.
SLURM_SCRIPT = os.path.join(REPO, 'launch', 'slurm_gpu.sbatch')


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
