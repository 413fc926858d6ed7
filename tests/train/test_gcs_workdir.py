"""Workdirs on cloud storage: the storage layer, tested in this process
against a GCS emulator on 127.0.0.1 (`gcs_in_process` in conftest.py;
skipped with the reason when the emulator or gcsfs is missing or cannot
start). Training, resuming and translating with --workdir=gs://bucket/path
in processes: e2e/test_gcs_workdir_e2e.py."""

import os

import pytest

from conftest import raises_naming
from transformer import storage

gcsfs = pytest.importorskip('gcsfs')
gcs_emulator = pytest.importorskip(
    'gcs_emulator', reason='needs gcp-storage-emulator (the test extra)')


def test_urls_that_leave_the_cache_or_have_no_backend_are_refused():
  with raises_naming(ValueError, 'gs://bucket/../../etc', '".."'):
    storage.local_mirror('gs://bucket/../../etc')
  with raises_naming(ValueError, 'ftp://host/run', 'gs://'):
    storage.check_remote('ftp://host/run')


def test_local_paths_keep_their_meaning(tmp_path):
  assert storage.local_mirror(str(tmp_path)) == str(tmp_path)
  assert storage.fetch(str(tmp_path / 'a')) == str(tmp_path / 'a')
  assert storage.join(str(tmp_path), 'b', 'c') == os.path.join(tmp_path, 'b',
                                                             'c')
  storage.write_atomically(str(tmp_path / 'x' / 'y.txt'), 'ok')
  assert [r for r, _ in storage.walk_files(str(tmp_path))] == ['x/y.txt']


def test_checkpoints_and_workdir_files_on_gs(gcs_in_process):
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from transformer import checkpoints  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir = 'gs://bucket/unit'
  workdir_lib.check_writable(workdir)
  with workdir_lib.lock(workdir):
    assert storage.exists(f'{workdir}/run.lock')
    with raises_naming(workdir_lib.WorkdirBusy, workdir, '--workdir',
                       f'delete {workdir}/run.lock'):
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
