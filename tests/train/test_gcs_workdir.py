"""Workdirs on cloud storage: training, resuming and translating with
--workdir=gs://bucket/path against a GCS emulator on 127.0.0.1 (skipped with
the reason when the emulator or gcsfs is missing or cannot start). The
end-to-end run is slow (three processes); the storage layer is tested in
this process."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from transformer import storage

gcsfs = pytest.importorskip('gcsfs')
gcs_emulator = pytest.importorskip(
    'gcs_emulator', reason='needs gcp-storage-emulator (the test extra)')

TRAIN = ['--config=' + os.path.join(REPO, 'experiments',
                                    'mt_offline.py:runlocal'),
         '--config.train.checkpoint_every=2', '--config.train.log_every=2',
         '--config.eval.num_bleu_examples=4']


@pytest.fixture(scope='module')
def emulator():
  try:
    server, url = gcs_emulator.start('bucket')
  except OSError as e:
    pytest.skip(f'the GCS emulator cannot start: {e}')
  yield url
  server.stop()


def run(env, *args, stdin=None):
  return subprocess.run([sys.executable, '-m', *args], cwd=REPO, env=env,
                        input=stdin, capture_output=True, text=True,
                        timeout=600)


def objects(url, prefix):
  os.environ['STORAGE_EMULATOR_HOST'] = url
  fs = gcsfs.GCSFileSystem(token='anon', skip_instance_cache=True)
  return {path.removeprefix(prefix + '/') for path in fs.find(prefix)}


@pytest.mark.slow
def test_train_resume_and_translate_on_gs(emulator):
  env = gcs_emulator.environment(emulator)
  workdir = 'gs://bucket/runs/mt'
  first = run(env, 'transformer.main', f'--workdir={workdir}', *TRAIN,
              '--config.train.num_steps=4', '--config.train.eval_every=4')
  assert first.returncode == 0, first.stderr[-3000:]
  # Library chatter (gcsfs, orbax) stays off the console.
  assert 'gcsfs' not in first.stderr and 'Traceback' not in first.stderr
  assert f'Checkpoints: {workdir}/checkpoints' in first.stdout
  stored = objects(emulator, 'bucket/runs/mt')
  for name in ('config.json', 'progress.json', 'vocab/spm.model',
               'checkpoints/2/checksums.json', 'checkpoints/4/checksums.json',
               'checkpoints/4/progress/metadata', 'logs/train.log',
               'reports/test_step4.txt',
               'plots/cross_attention_step4_layer_0.png'):
    assert name in stored, sorted(stored)
  assert any(n.startswith('events.out.tfevents') for n in stored)
  assert 'run.lock' not in stored  # released when the run ended

  resumed = run(env, 'transformer.main', f'--workdir={workdir}', *TRAIN,
                '--config.train.num_steps=6', '--config.train.eval_every=6')
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'step 6/6' in resumed.stdout and 'step 2/6' not in resumed.stdout
  assert 'checkpoints/6/checksums.json' in objects(emulator, 'bucket/runs/mt')

  translated = run(env, 'transformer.tools.translate', f'--workdir={workdir}',
                   stdin='the dog sees the cat\n')
  assert translated.returncode == 0, translated.stderr[-3000:]
  assert 'checkpoint of step 6' in translated.stderr + translated.stdout


def test_urls_that_leave_the_cache_or_have_no_backend_are_refused():
  with pytest.raises(ValueError, match='are not allowed'):
    storage.local_mirror('gs://bucket/../../etc')
  with pytest.raises(ValueError, match='only gs://'):
    storage.check_remote('ftp://host/run')


def test_local_paths_keep_their_meaning(tmp_path):
  assert storage.local_mirror(str(tmp_path)) == str(tmp_path)
  assert storage.fetch(str(tmp_path / 'a')) == str(tmp_path / 'a')
  assert storage.join(str(tmp_path), 'b', 'c') == os.path.join(tmp_path, 'b',
                                                             'c')
  storage.write_atomically(str(tmp_path / 'x' / 'y.txt'), 'ok')
  assert [r for r, _ in storage.walk_files(str(tmp_path))] == ['x/y.txt']


@pytest.fixture
def in_process(emulator, monkeypatch):
  """This process talking to the emulator (epath's choice of backend is
  cached per process: cleared so that gcsfs serves gs://)."""
  from etils.epath import gpath  # pylint: disable=g-import-not-at-top
  for name, value in gcs_emulator.environment(emulator).items():
    monkeypatch.setenv(name, value)
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
  yield
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access


def test_checkpoints_and_workdir_files_on_gs(in_process):
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from transformer import checkpoints  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir = 'gs://bucket/unit'
  workdir_lib.check_writable(workdir)
  with workdir_lib.lock(workdir):
    assert storage.exists(f'{workdir}/run.lock')
    with pytest.raises(workdir_lib.WorkdirBusy, match='delete gs://'):
      with workdir_lib.lock(workdir):
        pass
  assert not storage.exists(f'{workdir}/run.lock')
  workdir_lib.save_progress(workdir, {'step': 2, 'tokens': 5.0})
  assert workdir_lib.load_progress(workdir) == {'step': 2, 'tokens': 5.0}
  mngr = checkpoints.manager(workdir)
  params = {'w': jnp.arange(6.0).reshape(2, 3)}
  checkpoints.save(mngr, 2, params, {'m': jnp.zeros(3)}, {'tokens': 5.0})
  mngr.wait_until_finished()
  assert checkpoints.exist(workdir)
  checkpoints.verify_checksums(f'{workdir}/checkpoints/2')
  assert checkpoints.saved_progress(mngr, 2) == {'tokens': 5.0}
  restored, step = checkpoints.restore_params(workdir, params)
  mngr.close()
  assert step == 2 and restored['w'].tolist() == params['w'].tolist()
