"""Checkpoints that cannot lie: checksums verified on restore, write
failures in orbax's background threads ending the run promptly with one
message, and training counts restored with the checkpoint's step."""

import glob
import os
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import copy_of
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import checkpoints
from transformer import train
from transformer import workdir as workdir_lib


def flip_bytes(workdir, step):
  """Flips a few bytes in the middle of checkpoint `step`'s largest array
  file: the file stays readable, its numbers change."""
  data = [p for p in (workdir / 'checkpoints' / str(step) / 'params').rglob(
      '*') if p.is_file() and p.parent.name == 'd']
  path = max(data, key=lambda p: p.stat().st_size)
  raw = bytearray(path.read_bytes())
  middle = len(raw) // 2
  raw[middle:middle + 4] = bytes(255 - b for b in raw[middle:middle + 4])
  path.write_bytes(bytes(raw))


def test_every_finished_checkpoint_records_its_checksums(trained):
  for step in ('2', '4'):
    folder = trained / 'checkpoints' / step
    assert (folder / checkpoints.CHECKSUMS).is_file()
    checkpoints.verify_checksums(str(folder))


def test_flipped_bytes_are_caught_on_resume(trained, tmp_path, capsys):
  workdir = copy_of(trained, tmp_path)
  flip_bytes(workdir, 4)
  with pytest.raises(ValueError, match='checksum mismatch'):
    checkpoints.verify_checksums(str(workdir / 'checkpoints' / '4'))
  train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  out = capsys.readouterr().out
  assert 'Checkpoint 4 cannot be restored' in out and 'checksum' in out
  assert 'resuming from checkpoint 2' in out
  assert (workdir / 'unreadable_checkpoints' / '4').is_dir()
  assert 'step 4/6' in out  # training went on from step 2


def test_flipped_bytes_are_caught_by_the_commands(trained, tmp_path, capsys):
  workdir = copy_of(trained, tmp_path)
  flip_bytes(workdir, 4)
  restored = workdir_lib.restore(str(workdir))
  assert restored.step == 2
  out = capsys.readouterr().out
  assert 'Checkpoint 4' in out and 'is damaged' in out
  flip_bytes(workdir, 2)
  with pytest.raises(ValueError, match=r'Every checkpoint .* is damaged'):
    workdir_lib.restore(str(workdir))
  # Reading never moves checkpoints.
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2', '4']


def test_counts_resume_from_the_checkpoint_not_progress_json(trained,
                                                             tmp_path):
  workdir = copy_of(trained, tmp_path)
  tokens_at_4 = workdir_lib.load_progress(str(workdir))['tokens']
  # A kill after progress.json was written but before checkpoint 6 was
  # complete leaves progress.json ahead of the latest checkpoint.
  workdir_lib.save_progress(str(workdir), {'step': 6, 'tokens': 1e9,
                                           'train_seconds': 1e6})
  mngr = checkpoints.manager(str(workdir), read_only=True)
  assert checkpoints.saved_progress(mngr, 4)['tokens'] == tokens_at_4
  mngr.close()
  train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  progress = workdir_lib.load_progress(str(workdir))
  assert progress['step'] == 6
  assert tokens_at_4 < progress['tokens'] < 2 * tokens_at_4


def test_async_write_failure_ends_the_run_naming_the_step(tmp_path,
                                                          monkeypatch):
  """Checkpoint 4's temporary folder is replaced by a file while orbax's
  threads write into it: the run ends at once, naming step 4, the cause and
  checkpoint 2, and leaves no temporary folder."""
  save = checkpoints.save

  def sabotaged(mngr, step, *args, **kwargs):
    save(mngr, step, *args, **kwargs)
    if step == 4:
      for tmp in glob.glob(os.path.join(mngr.directory, '4.orbax-*')):
        shutil.rmtree(tmp)
        with open(tmp, 'w') as f:
          f.write('not a folder')
  monkeypatch.setattr(checkpoints, 'save', sabotaged)
  signal.alarm(300)  # a hang fails the test instead of stalling the suite
  try:
    with pytest.raises(checkpoints.WriteFailed,
                       match=r'Writing checkpoint 4 into .* failed: .*'
                       r'checkpoint 2 is intact'):
      train.train_and_evaluate(tiny_config(steps=8), str(tmp_path))
  finally:
    signal.alarm(0)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2']
  mngr = checkpoints.manager(str(tmp_path), read_only=True)
  assert mngr.all_steps() == [2]


@pytest.fixture
def small_disk(tmp_path):
  """A 2 MiB tmpfs (root only: skipped where mounting is not allowed)."""
  mount = tmp_path / 'disk'
  mount.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2M', 'tmpfs',
                     str(mount)], capture_output=True).returncode:
    pytest.skip('mounting a small tmpfs needs root')
  yield mount
  subprocess.run(['umount', str(mount)], check=False)


def test_full_disk_stops_training_with_one_line(small_disk):
  workdir = small_disk / 'run'
  command = [sys.executable, '-m', 'transformer.main', f'--workdir={workdir}',
             '--config=' + os.path.join(REPO, 'experiments',
                                        'mt_offline.py:runlocal'),
             '--config.train.num_steps=60', '--config.train.log_every=2',
             '--config.train.checkpoint_every=2',
             '--config.train.eval_every=1000']
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          timeout=300,
                          env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 1, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr + result.stdout
  [error] = [line for line in result.stderr.splitlines()
             if line.startswith('Error:')]
  assert 'No space left on device' in error
  assert 'is intact: rerun to resume from it' in error
  assert not [n for n in os.listdir(workdir / 'checkpoints') if 'tmp' in n]
