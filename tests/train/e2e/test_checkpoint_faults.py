"""Checkpoints that cannot lie: checksums written by the save itself and
verified on restore, write failures in orbax's background threads ending
the process promptly with one message and leaving nothing behind, and
training counts restored with the checkpoint's step."""

import glob
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import copy_of
from conftest import raises_naming
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


# A training command: mt_offline:runlocal, 12 steps, a checkpoint every 4.
FLAGS = ['--config=' + os.path.join(REPO, 'experiments',
                                    'mt_offline.py:runlocal'),
         '--config.train.num_steps=12', '--config.train.log_every=1',
         '--config.train.checkpoint_every=4', '--config.train.eval_every=100',
         '--config.eval.num_bleu_examples=2']
ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu'}


def train_command(workdir, *flags):
  return [sys.executable, '-m', 'transformer.main', f'--workdir={workdir}',
          *FLAGS, *flags]


def error_lines(result):
  return [line for line in result.stderr.splitlines()
          if line.startswith('Error:')]


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
  with raises_naming(checkpoints.Unrestorable, f'{workdir}/checkpoints',
                     'checkpoints 4, 2', '--workdir'):
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
    with raises_naming(checkpoints.WriteFailed, 'checkpoint 4',
                       f'{tmp_path}/checkpoints', 'checkpoint 2 is intact',
                       'rerun'):
      train.train_and_evaluate(tiny_config(steps=8), str(tmp_path))
  finally:
    signal.alarm(0)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2']
  mngr = checkpoints.manager(str(tmp_path), read_only=True)
  assert mngr.all_steps() == [2]
  # None of the write's threads is left waiting.
  assert not [t for t in threading.enumerate() if t.is_alive() and
              type(t).__name__ == '_SignalingThread']


# transformer.main whose checkpoints folder becomes a file before the save
# of step 4: orbax's thread creating the step's folder fails, and the
# threads waiting for it would wait 5 minutes each.
FOLDER_BECOMES_A_FILE = """
import os, shutil
from transformer import checkpoints, main
save = checkpoints.save
def sabotaged(mngr, step, *args, **kwargs):
  if step == 4:
    mngr.wait_until_finished()
    shutil.rmtree(mngr.directory)
    with open(mngr.directory, 'w') as f:
      f.write('not a folder')
  save(mngr, step, *args, **kwargs)
checkpoints.save = sabotaged
main.run()
"""


def test_failed_write_ends_the_process_promptly(tmp_path):
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, '-c', FOLDER_BECOMES_A_FILE, f'--workdir={tmp_path}',
       *FLAGS], cwd=REPO, capture_output=True, text=True, timeout=240,
      env=ENV)
  seconds = time.monotonic() - start
  assert result.returncode == 1, result.stderr[-3000:]
  [error] = error_lines(result)
  assert 'checkpoint 4' in error and 'Not a directory' in error
  assert 'Traceback' not in result.stderr
  assert 'was never awaited' not in result.stderr
  # The same run without the fault takes about 20 s on a loaded CPU; orbax's
  # threads left waiting held it 5 minutes.
  assert seconds < 150, seconds


def fill(folder):
  """Fills the filesystem of `folder` with a file of zeros."""
  fd = os.open(os.path.join(folder, 'filler'), os.O_WRONLY | os.O_CREAT)
  try:
    while True:
      os.write(fd, bytes(1 << 16))
  except OSError:
    pass
  try:
    while True:
      os.write(fd, bytes(512))
  except OSError:
    pass
  os.close(fd)


def mounted_tmpfs(folder, size):
  """A tmpfs of `size` (e.g. '2M') at `folder` (root only: skipped where
  mounting is not allowed); unmount it with `subprocess.run(['umount'...`."""
  folder.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs',
                     str(folder)], capture_output=True).returncode:
    pytest.skip('mounting a small tmpfs needs root')
  return folder


@pytest.fixture
def small_disk(tmp_path):
  """A 2 MiB tmpfs."""
  yield mounted_tmpfs(tmp_path / 'disk', '2M')
  # Lazily: a file the test's run left open must not keep it mounted.
  subprocess.run(['umount', '-l', str(tmp_path / 'disk')], check=False)


@pytest.fixture
def disk(tmp_path):
  """A 6 MiB tmpfs: a 4-step run and its checkpoints fit."""
  yield mounted_tmpfs(tmp_path / 'disk', '6M')
  # Lazily: a file the test's run left open must not keep it mounted.
  subprocess.run(['umount', '-l', str(tmp_path / 'disk')], check=False)


def test_disk_full_at_the_first_checkpoint_leaves_nothing_behind(
    disk, monkeypatch):
  """The disk fills just before checkpoint 2: the run stops with its cause
  and removes what the write left; once space is freed, the rerun trains.
  A write killed earlier (its temporary folder left, taking the disk) does
  not block it either."""
  workdir = disk / 'run'
  save = checkpoints.save

  def filling(mngr, step, *args, **kwargs):
    if step == 2:
      fill(disk)
    save(mngr, step, *args, **kwargs)
  monkeypatch.setattr(checkpoints, 'save', filling)
  with raises_naming(checkpoints.WriteFailed, 'checkpoint 2',
                     'No space left on device',
                     'no checkpoint was completed', 'Free space'):
    train.train_and_evaluate(tiny_config(steps=4), str(workdir))
  assert os.listdir(workdir / 'checkpoints') == []
  monkeypatch.setattr(checkpoints, 'save', save)
  os.remove(disk / 'filler')
  # What a write of step 6 killed by the OOM killer (say) would leave,
  # taking all but 256 KiB of the space freed: checkpoint 2 needs more.
  left = workdir / 'checkpoints' / '6.orbax-checkpoint-tmp' / 'params'
  left.mkdir(parents=True)
  free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
  (left / 'data').write_bytes(bytes(free - (256 << 10)))
  train.train_and_evaluate(tiny_config(steps=4), str(workdir))
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2', '4']


# 18 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
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
  assert 'is intact' in error and 'rerun' in error
  assert not [n for n in os.listdir(workdir / 'checkpoints') if 'tmp' in n]
  # Space freed, the same command resumes from the intact checkpoint.
  subprocess.run(['mount', '-o', 'remount,size=64M', str(small_disk)],
                 check=True)
  intact = int(error.split('checkpoint ')[-1].split(' is intact')[0])
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          timeout=300,
                          env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'step {intact + 2}/60' in result.stdout

# -- Checksums are part of the save ------------------------------------------


# 17 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_checkpoint_killed_right_after_its_write_is_verified(tmp_path):
  """SIGKILL as soon as checkpoint 8 is in place (before the save of step
  12, where its checksums were once recorded), then a byte flipped in it:
  the resume refuses it, naming it, and trains on from checkpoint 4."""
  process = subprocess.Popen(train_command(tmp_path), cwd=REPO, env=ENV,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  folder = tmp_path / 'checkpoints' / '8'
  deadline = time.monotonic() + 400
  while not folder.is_dir():
    assert process.poll() is None and time.monotonic() < deadline
    time.sleep(0.002)
  process.kill()
  process.wait(timeout=60)
  assert (folder / checkpoints.CHECKSUMS).is_file()
  flip_bytes(tmp_path, 8)
  result = subprocess.run(train_command(tmp_path), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=400)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Checkpoint 8' in result.stdout
  assert '1 of its files changed' in result.stdout
  assert 'resuming from checkpoint 4' in result.stdout
  assert 'step 5/12' in result.stdout


def test_checkpoint_without_checksums_is_called_unverified(trained, tmp_path,
                                                           capsys):
  workdir = copy_of(trained, tmp_path)
  (workdir / 'checkpoints' / '4' / checkpoints.CHECKSUMS).unlink()
  train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  out = capsys.readouterr().out
  assert 'Checkpoint 4 in ' in out and 'has no checksums.json' in out
  assert 'using it unverified' in out
  assert 'step 6/6' in out and 'step 4/6' not in out  # resumed from 4


def test_every_checkpoint_damaged_ends_in_one_line(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  flip_bytes(workdir, 4)
  flip_bytes(workdir, 2)
  result = subprocess.run(train_command(workdir), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=400)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  [error] = error_lines(result)
  assert error.startswith('Error: ')
  assert f'{workdir}/checkpoints' in error and 'checkpoints 4, 2' in error
  assert '--workdir' in error
  assert 'Checkpoint 4' in result.stdout
  assert '1 of its files changed' in result.stdout
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2', '4']


def test_averaging_names_a_damaged_checkpoint_and_those_used(
    trained, tmp_path, capsys):
  workdir = copy_of(trained, tmp_path)
  flip_bytes(workdir, 2)
  restored = workdir_lib.restore(str(workdir), average=2)
  assert restored.step == 4
  out = capsys.readouterr().out
  assert f'Checkpoint 2 in {workdir}/checkpoints' in out
  assert '1 of its files changed' in out and 'averaging without it' in out
  assert 'Averaged 1 checkpoint (step 4) of the 2 asked for.' in out


def test_a_checkpoint_folder_replaced_mid_run_is_named(trained, tmp_path):
  """Moved away and a file put in its place while the run trains: orbax's
  own words were about its metadata ("No ArrayMetadata ... ParamInfo")."""
  workdir = copy_of(trained, tmp_path)
  mngr = checkpoints.manager(str(workdir), max_to_keep=5)
  params = mngr.restore(4)
  folder = workdir / 'checkpoints'
  folder.rename(tmp_path / 'moved')
  folder.write_text('')
  with pytest.raises(checkpoints.WriteFailed) as error:
    checkpoints.save(mngr, 6, params['params'], params['opt_state'])
    mngr.wait_until_finished()
  message = str(error.value)
  assert str(folder) in message and 'disappeared or was replaced' in message
  assert 'rerun' in message
  assert 'ParamInfo' not in message and 'ArrayMetadata' not in message
  assert 'Free space' not in message
