"""Reliability in runs: preemption and exact resume, damaged checkpoints,
config changes on resume, one run per workdir, non-finite steps. (Settings
refused before a run trains: ../test_faults.py.)"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import copy_of
from conftest import raises_naming
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import checkpoints
from transformer import faults
from transformer import train
from transformer import workdir as workdir_lib
from transformer.tasks import translation

STEPS = 12
FLAGS = ['--config=' + os.path.join(REPO, 'experiments',
                                    'mt_offline.py:runlocal'),
         f'--config.train.num_steps={STEPS}', '--config.train.log_every=1',
         '--config.train.checkpoint_every=4', '--config.train.eval_every=100',
         '--config.eval.num_bleu_examples=4']


def start_training(workdir):
  return subprocess.Popen(
      [sys.executable, '-m', 'transformer.main', f'--workdir={workdir}',
       *FLAGS], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def run_until(process, line_start: str) -> str:
  """Reads the output until a line starting with `line_start`."""
  seen = []
  for line in process.stdout:
    seen.append(line)
    if line.startswith(line_start):
      return ''.join(seen)
  raise AssertionError('training ended before ' + line_start +
                       ''.join(seen[-30:]))


def final_params(workdir):
  mngr = checkpoints.manager(str(workdir), read_only=True)
  step = mngr.latest_step()
  params = mngr.restore(step)['params']
  mngr.close()
  return step, params


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('uninterrupted')
  process = start_training(workdir)
  output = process.communicate(timeout=600)[0]
  assert process.returncode == 0, output[-3000:]
  # Libraries' INFO lines go to the workdir's log, not to the console.
  assert not re.search(r'^I\d{4} ', output, re.M), output[-3000:]
  log = (workdir / 'logs' / 'train.log').read_text()
  assert 'checkpoint_manager.py' in log and 'JAX devices' in log
  return final_params(workdir)


def assert_bitwise_equal(a, b):
  (step_a, params_a), (step_b, params_b) = a, b
  assert step_a == step_b == STEPS
  leaves_a, leaves_b = jax.tree.leaves(params_a), jax.tree.leaves(params_b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_sigterm_checkpoints_exits_and_resumes_bitwise(uninterrupted,
                                                       tmp_path):
  process = start_training(tmp_path)
  run_until(process, 'step 6/')  # a step that is not a checkpoint step
  process.send_signal(signal.SIGTERM)
  output = process.communicate(timeout=300)[0]
  assert process.returncode == faults.PREEMPTED_EXIT_CODE, output[-3000:]
  assert 'SIGTERM received' in output and 'Preempted at step' in output
  stopped = int(output.split('Preempted at step ')[1].split(':')[0])
  assert 6 <= stopped < STEPS
  assert stopped in checkpoints.manager(str(tmp_path),
                                        read_only=True).all_steps()
  resumed = start_training(tmp_path)
  output = resumed.communicate(timeout=600)[0]
  assert resumed.returncode == 0, output[-3000:]
  assert f'step {stopped + 1}/{STEPS}' in output
  assert f'step {stopped}/{STEPS}' not in output
  assert f'Resumed from the checkpoint of step {stopped} of {STEPS}.' in output
  assert_bitwise_equal(final_params(tmp_path), uninterrupted)
  again = start_training(tmp_path)  # a finished run, rerun: says so
  output = again.communicate(timeout=600)[0]
  assert again.returncode == 0, output[-3000:]
  assert (f'Resumed from the checkpoint of step {STEPS} of {STEPS}: '
          'training is done; evaluating it again.') in output
  assert f'step {STEPS}/{STEPS}' not in output


def test_sigkill_resumes_from_the_last_periodic_checkpoint_bitwise(
    uninterrupted, tmp_path):
  process = start_training(tmp_path)
  run_until(process, 'step 7/')
  process.kill()
  process.communicate(timeout=60)
  # Checkpoint 4 if its asynchronous write had finished, else none (then
  # 8 if the process ran ahead): never a half-written one.
  mngr = checkpoints.manager(str(tmp_path), read_only=True)
  latest = mngr.latest_step() or 0
  mngr.close()
  assert latest in (0, 4, 8)
  resumed = start_training(tmp_path)
  output = resumed.communicate(timeout=600)[0]
  assert resumed.returncode == 0, output[-3000:]
  assert f'step {latest + 1}/' in output and f'step {latest}/' not in output
  assert_bitwise_equal(final_params(tmp_path), uninterrupted)


@pytest.mark.parametrize('damage', ['truncate', 'delete'])
def test_damaged_latest_checkpoint_falls_back_to_the_previous(
    trained, tmp_path, capsys, damage):
  workdir = copy_of(trained, tmp_path)
  data = workdir / 'checkpoints' / '4' / 'params'
  files = [p for p in data.rglob('*') if p.is_file() and p.parent.name == 'd']
  assert files
  for path in files:
    if damage == 'truncate':
      with open(path, 'r+b') as f:
        f.truncate(8)
    else:
      path.unlink()
  config = tiny_config(steps=6)
  train.train_and_evaluate(config, str(workdir))
  out = capsys.readouterr().out
  assert 'Checkpoint 4 cannot be restored' in out
  assert 'resuming from checkpoint 2' in out
  assert (workdir / 'unreadable_checkpoints' / '4').is_dir()
  assert 'step 4/6' in out  # training went on from step 2
  mngr = checkpoints.manager(str(workdir), read_only=True)
  assert max(mngr.all_steps()) == 6


def test_interrupted_write_is_never_the_latest(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  # What orbax leaves when a process dies while writing step 6.
  shutil.copytree(workdir / 'checkpoints' / '4',
                  workdir / 'checkpoints' / '6.orbax-checkpoint-tmp-123')
  mngr = checkpoints.manager(str(workdir), read_only=True)
  assert mngr.latest_step() == 4


def test_unreadable_checkpoints_everywhere_are_reported_not_moved(
    trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  for step in ('2', '4'):
    for path in (workdir / 'checkpoints' / step / 'params').rglob('*'):
      if path.is_file() and path.parent.name == 'd':
        path.unlink()
  with raises_naming(checkpoints.Unrestorable, f'{workdir}/checkpoints',
                     'checkpoints 4, 2', '--workdir'):
    train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2', '4']


def test_model_change_on_resume_is_refused_with_the_fields(trained,
                                                           tmp_path):
  workdir = copy_of(trained, tmp_path)
  config = tiny_config(steps=6)
  config.model.d_model = 48
  with pytest.raises(checkpoints.IncompatibleCheckpoint) as error:
    train.train_and_evaluate(config, str(workdir))
  message = str(error.value)
  assert 'model.d_model: None -> 48' in message
  assert "['decoder']['layer_0']" in message and '(32,) -> (48,)' in message
  assert '--workdir' in message


def test_vocabulary_change_on_resume_is_refused(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  config = tiny_config(steps=6)
  config.data.vocab_size = 257
  with pytest.raises(checkpoints.IncompatibleCheckpoint,
                     match='data.vocab_size'):
    train.train_and_evaluate(config, str(workdir))


def test_allowed_changes_apply_on_resume(trained, tmp_path, capsys):
  workdir = copy_of(trained, tmp_path)
  config = tiny_config(steps=6)
  config.optimizer.learning_rate = 0.5
  config.train.log_every = 1
  train.train_and_evaluate(config, str(workdir))
  out = capsys.readouterr().out
  assert 'Resuming with config changes' in out
  assert 'optimizer.learning_rate' in out and 'train.num_steps 4 -> 6' in out
  assert 'step 5/6' in out  # log_every=1 applied
  assert workdir_lib.load_config(str(workdir)).optimizer.learning_rate == 0.5


def test_damaged_progress_file_is_reported_and_training_goes_on(
    trained, tmp_path, capsys):
  workdir = copy_of(trained, tmp_path)
  tokens_at_4 = workdir_lib.load_progress(str(workdir))['tokens']
  (workdir / 'progress.json').write_text('{"step": 4, "train_')  # cut short
  assert workdir_lib.load_progress(str(workdir)) == {}
  assert 'progress.json is damaged' in capsys.readouterr().out
  train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  assert 'step 6/6' in capsys.readouterr().out
  # The counts go on from those checkpoint 4 holds.
  progress = workdir_lib.load_progress(str(workdir))
  assert progress['step'] == 6 and progress['tokens'] > tokens_at_4
  assert not [n for n in os.listdir(workdir) if n.endswith('.tmp')]


def test_damaged_config_file_names_the_file(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  (workdir / 'config.json').write_text('{"task": "transl')
  with raises_naming(ValueError, f'{workdir}/config.json', 'not valid JSON',
                     '--workdir'):
    workdir_lib.load_config(str(workdir))
  (workdir / 'config.json').write_text('{"seed": 0}')
  with raises_naming(ValueError, f'{workdir}/config.json', 'no "task"',
                     '--workdir'):
    workdir_lib.restore(str(workdir))


# Holds the lock of the workdir argv[1] until killed.
HOLD_LOCK = ('import sys, time; from transformer import workdir; '
             'held = workdir.lock(sys.argv[1]); held.__enter__(); '
             'print("held", flush=True); time.sleep(120)')


def test_one_training_run_per_workdir(tmp_path, capsys):
  holder = subprocess.Popen([sys.executable, '-c', HOLD_LOCK, str(tmp_path)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    second = subprocess.run(
        [sys.executable, '-m', 'transformer.main', f'--workdir={tmp_path}',
         *FLAGS], cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert second.returncode == 2, second.stderr[-2000:]
    assert str(tmp_path) in second.stderr and '--workdir' in second.stderr
    assert f'pid {holder.pid}' in second.stderr
    assert 'Traceback' not in second.stderr
    assert not os.path.exists(tmp_path / 'checkpoints')  # refused at once
  finally:
    holder.kill()
    holder.wait()
  # The killed holder's lock is taken over, and released empty.
  with workdir_lib.lock(str(tmp_path)):
    assert f'pid {os.getpid()}' in (tmp_path / 'run.lock').read_text()
  assert 'from a run that ended without releasing it (host' in \
      capsys.readouterr().out
  assert not (tmp_path / 'run.lock').exists()  # released: gone


def poisoned_loss(step_batches, bad_steps):
  """translation_loss that is NaN on the batches of `bad_steps`."""
  sums = jnp.asarray([int(step_batches[s]['inputs'].sum())
                      for s in bad_steps])
  original = translation.translation_loss

  def loss(model, params, batch, rng, **kwargs):
    value, metric_sums = original(model, params, batch, rng, **kwargs)
    bad = jnp.isin(batch['inputs'].sum(), sums)
    nan = jnp.where(bad, jnp.nan, 1.0)
    return value * nan, {**metric_sums,
                         'loss': (metric_sums['loss'][0] * nan,
                                  metric_sums['loss'][1])}
  return loss


def batches_by_step(config, workdir):
  trainer = train.Trainer(config, workdir)
  iterator = trainer.task.train_iter(0)
  return {step: next(iterator) for step in range(1, config.train.num_steps
                                                 + 1)}


def poisoned_run(tmp_path, monkeypatch, bad_steps, **train_changes):
  """A 6-step config and workdir whose steps `bad_steps` have a NaN loss."""
  config = tiny_config(steps=6)
  config.train.update(train_changes)
  workdir = str(tmp_path)
  batches = batches_by_step(config, workdir)
  monkeypatch.setattr(translation, 'translation_loss',
                      poisoned_loss(batches, bad_steps))
  return config, workdir


def test_nonfinite_step_stops_with_a_report(tmp_path, monkeypatch):
  config, workdir = poisoned_run(tmp_path, monkeypatch, [5])
  with pytest.raises(faults.NonFiniteError) as error:
    train.train_and_evaluate(config, workdir)
  message = str(error.value)
  assert message.startswith('Step 5 ')
  assert "config.train.nonfinite='skip'" in message
  assert "['decoder']" in message and 'inputs (' in message
  assert 'Loss sum nan over' in message  # the step's own, not zeroed
  # Checkpoints 2 and 4 are kept; nothing was saved after the fault.
  assert checkpoints.manager(workdir, read_only=True).all_steps() == [2, 4]


def test_stop_never_evaluates_a_nonfinite_step(tmp_path, monkeypatch, capfd):
  # 'stop' applies the step on device (no old state kept), so the
  # evaluation at step 3 must judge it first: the run ends there.
  config, workdir = poisoned_run(tmp_path, monkeypatch, [3], eval_every=3)
  with pytest.raises(faults.NonFiniteError, match='Step 3 produced'):
    train.train_and_evaluate(config, workdir)
  assert 'eval at step 3' not in capfd.readouterr().out
  assert checkpoints.manager(workdir, read_only=True).all_steps() == [2]


def test_stop_never_logs_a_nonfinite_step(tmp_path, monkeypatch, capfd):
  config, workdir = poisoned_run(tmp_path, monkeypatch, [3], log_every=3)
  with pytest.raises(faults.NonFiniteError, match='Step 3 produced'):
    train.train_and_evaluate(config, workdir)
  assert 'step 3/6' not in capfd.readouterr().out


def test_nonfinite_steps_are_skipped_and_counted(tmp_path, monkeypatch,
                                                 capfd):
  config, workdir = poisoned_run(tmp_path, monkeypatch, [3, 4],
                                 nonfinite='skip', log_every=6)
  result = train.train_and_evaluate(config, workdir)
  out = capfd.readouterr().out
  assert 'Step 3: non-finite loss, gradients of ' in out
  assert 'parameters, new parameters; update skipped' in out
  assert '2 skipped so far, 2 in a row' in out
  assert np.isfinite(result['loss'])


def test_too_many_consecutive_skips_stop(tmp_path, monkeypatch):
  config, workdir = poisoned_run(tmp_path, monkeypatch, [3, 4],
                                 nonfinite='skip', max_consecutive_skips=1)
  with raises_naming(faults.NonFiniteError, 'Step 4 ', '2 steps in a row',
                     'config.train.max_consecutive_skips=1',
                     'config.optimizer.learning_rate') as caught:
    train.train_and_evaluate(config, workdir)
  # Skipping is what this run does already: not offered as the fix.
  assert "nonfinite='skip' skips" not in str(caught.value)


def test_bad_evaluation_setting_stops_the_run_before_it_trains(tmp_path):
  """Once the whole run trained, then died in its final evaluation."""
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.main', f'--workdir={tmp_path}',
       *FLAGS, '--config.eval.beam_size=0'], cwd=REPO, capture_output=True,
      text=True, timeout=300, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 2, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('Error: ')
  assert 'config.eval.beam_size=0' in last and '>= 1' in last
  assert 'Traceback' not in result.stderr
  assert not (tmp_path / 'checkpoints').exists()


def test_sigterm_during_the_final_evaluation_stops_it(tmp_path, monkeypatch,
                                                      capfd):
  """The signal stops the evaluation (a grace period is shorter than a beam
  search over a test set) and the run exits 75; it was swallowed, and the
  run went on to exit 0."""
  evaluated = []
  original = train.Trainer.evaluate

  def evaluate(self, params, label):
    if not evaluated:  # the first (final) evaluation is preempted
      evaluated.append(label)
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(60)  # a long evaluation, which the signal must end
      raise AssertionError('the evaluation went on after SIGTERM')
    evaluated.append(label)
    return original(self, params, label)

  monkeypatch.setattr(train.Trainer, 'evaluate', evaluate)
  config = tiny_config(steps=2)
  start = time.time()
  with pytest.raises(faults.Preempted) as error:
    train.train_and_evaluate(config, str(tmp_path))
  assert time.time() - start < 50
  assert 'Preempted at step 2' in str(error.value)
  assert 'SIGTERM received' in capfd.readouterr().out
  assert checkpoints.manager(str(tmp_path), read_only=True).all_steps() == [2]
  # Rerunning evaluates what the run ended with.
  result = train.train_and_evaluate(config, str(tmp_path))
  assert evaluated == ['step2', 'step2'] and 'bleu' in result


def test_sigint_during_start_up_ends_in_one_line(tmp_path):
  """Ctrl-C before the training loop's handler is installed: one line and
  exit code 130, not a KeyboardInterrupt traceback."""
  workdir = tmp_path / 'run'
  workdir.mkdir()
  # config.json a pipe: the run blocks reading it as it starts (after the
  # task is built, before training's own handler is installed).
  fifo = workdir / 'config.json'
  os.mkfifo(fifo)
  process = subprocess.Popen(
      [sys.executable, '-m', 'transformer.main', f'--workdir={workdir}',
       *FLAGS], cwd=REPO, env={**os.environ, 'JAX_PLATFORMS': 'cpu'},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  writer = None
  try:
    deadline = time.time() + 300
    while writer is None and time.time() < deadline:
      try:  # succeeds once the run opens the pipe to read it
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
      except OSError:
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    assert writer is not None
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
  finally:
    if writer is not None:
      os.close(writer)
    process.kill()
  assert process.returncode == 130, stderr[-3000:]
  assert 'Traceback' not in stderr and 'KeyboardInterrupt' not in stderr
  assert stderr.strip().splitlines()[-1].startswith('Interrupted (SIGINT)')


def test_an_override_the_source_ignores_is_refused_before_any_file(tmp_path):
  """`--config.data.path` on the generated corpus: refused at once,
  naming the source that reads it, and nothing is written."""
  workdir = tmp_path / 'run'
  refused = subprocess.run(
      [sys.executable, '-m', 'transformer.main', f'--workdir={workdir}',
       '--config=experiments/lm_offline.py:runlocal',
       '--config.data.path=input.txt'], cwd=REPO, capture_output=True,
      text=True, check=False, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert refused.returncode == 2, refused.stderr[-2000:]
  assert 'config.data.path' in refused.stderr
  assert 'config.data.source: local' in refused.stderr
  assert 'Traceback' not in refused.stderr
  assert not workdir.exists()
