"""The workdir's own files (config.json, progress.json, run.lock) are
checked against their schema whenever they are read (`workdir.SCHEMAS`): a
damaged or mistyped one is named with its field, never a traceback, a codec
error or a value used silently."""

import json
import os
import subprocess
import sys

import pytest

from conftest import copy_of
from conftest import load_experiment
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import train
from transformer import workdir as workdir_lib

ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu'}

# -- run.lock -----------------------------------------------------------------


def test_binary_run_lock_is_named_and_taken_over(tmp_path, capsys):
  (tmp_path / 'run.lock').write_bytes(b'\xff\xfe\x00\x01garbage\x80')
  with workdir_lib.lock(str(tmp_path)):
    held = (tmp_path / 'run.lock').read_text()
  out = capsys.readouterr().out
  assert (f'{tmp_path}/run.lock is damaged: not UTF-8 text (byte 0 is 0xff); '
          f'no run holds it, so this run takes it over.') in out
  assert held.startswith('host ') and f'pid {os.getpid()}' in held
  assert not (tmp_path / 'run.lock').exists()  # released: gone


def test_a_run_ending_in_an_error_leaves_no_lock_file(tmp_path):
  with pytest.raises(RuntimeError):
    with workdir_lib.lock(str(tmp_path)):
      raise RuntimeError('the run failed')
  assert not (tmp_path / 'run.lock').exists()
  with workdir_lib.lock(str(tmp_path)):  # taken again at once, silently
    assert (tmp_path / 'run.lock').read_text().startswith('host ')


def test_a_lock_file_removed_while_being_taken_is_opened_again(
    tmp_path, monkeypatch):
  # A run ending between this run's open and its lock removes the file it
  # opened: a lock on that file would not exclude the next run.
  real_flock, calls = workdir_lib.fcntl.flock, []

  def flock_after_the_holder_left(handle, operation):
    calls.append(os.fstat(handle.fileno()).st_ino)
    if len(calls) == 1:
      os.unlink(tmp_path / 'run.lock')
    real_flock(handle, operation)

  monkeypatch.setattr(workdir_lib.fcntl, 'flock', flock_after_the_holder_left)
  with workdir_lib.lock(str(tmp_path)):
    held = os.stat(tmp_path / 'run.lock').st_ino
  assert len(calls) == 2 and calls[-1] == held


# Holds the lock of the workdir argv[1] until killed, its record garbage.
HOLD_DAMAGED_LOCK = (
    'import sys, time; from transformer import workdir; '
    'held = workdir.lock(sys.argv[1]); held.__enter__(); '
    'open(sys.argv[1] + "/run.lock", "wb").write(b"\\x00\\xc3(locked"); '
    'print("held", flush=True); time.sleep(120)')


def test_held_run_lock_with_a_damaged_record_is_named(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, '-c', HOLD_DAMAGED_LOCK, str(tmp_path)], cwd=REPO,
      stdout=subprocess.PIPE, text=True, env=ENV)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(workdir_lib.WorkdirBusy,
                       match=r'is in use by another training run \(.*'
                       r'run.lock is damaged: not UTF-8 text \(byte 1'):
      with workdir_lib.lock(str(tmp_path)):
        pass
  finally:
    holder.kill()
    holder.wait()


def test_run_lock_of_another_format_is_named(tmp_path, capsys):
  (tmp_path / 'run.lock').write_text('locked by the night shift')
  with workdir_lib.lock(str(tmp_path)):
    pass
  assert ('run.lock is damaged: \'locked by the night shift\' is not a '
          'holder record') in capsys.readouterr().out


# -- progress.json ------------------------------------------------------------


@pytest.mark.parametrize('content, problem', [
    ('{"step": true, "tokens": 5}', '"step" is true, not a whole number >= 0'),
    ('{"step": "4", "tokens": 5}', '"step" is "4", not a whole number >= 0'),
    ('{"step": -4}', '"step" is -4, not a whole number >= 0'),
    ('{"step": 4.5}', '"step" is 4.5, not a whole number >= 0'),
    ('{"step": 4, "tokens": NaN}', '"tokens" is NaN, not a finite number'),
    ('{"step": 4, "tokens": [1, 2]}',
     '"tokens" is [1, 2], not a finite number >= 0'),
    ('{"step": 4, "train_seconds": -3.0}',
     '"train_seconds" is -3.0, not a finite number >= 0'),
    ('{"tokens": 5}', 'no "step"'),
    ('[4, 5]', 'not a JSON object but list'),
    (b'\x80\x81', 'not UTF-8 text (byte 0 is 0x80)'),
])
def test_mistyped_progress_file_is_named_with_its_field(tmp_path, capsys,
                                                        content, problem):
  path = tmp_path / 'progress.json'
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content)
  assert workdir_lib.load_progress(str(tmp_path)) == {}
  out = capsys.readouterr().out
  assert f'{path} is damaged: {problem}' in out
  assert 'the checkpoints are unaffected' in out


def test_progress_file_of_the_right_types_is_read(tmp_path, capsys):
  progress = {'step': 4, 'tokens': 1200.0, 'train_seconds': 3.5, 'images': 0}
  (tmp_path / 'progress.json').write_text(json.dumps(progress))
  assert workdir_lib.load_progress(str(tmp_path)) == progress
  assert not capsys.readouterr().out


# -- config.json --------------------------------------------------------------


@pytest.mark.parametrize('change, problem', [
    ({'train': {'num_steps': 'ten'}},
     '"train.num_steps" is "ten", not a whole number'),
    ({'train': {'num_steps': 1.5}},
     '"train.num_steps" is 1.5, not a whole number'),
    ({'train': {'num_steps': None}},
     '"train.num_steps" is null, not a whole number'),
    ({'model': {'num_heads': True}},
     '"model.num_heads" is true, not a whole number'),
    ({'optimizer': {'learning_rate': '1e-3'}},
     '"optimizer.learning_rate" is "1e-3", not a number'),
    ({'data': {'packing': 1}}, '"data.packing" is 1, not true or false'),
    ({'eval': 5}, '"eval" is 5, not a section (a JSON object)'),
    ({'model': ['d_model', 32]},
     '"model" is ["d_model", 32], not a section (a JSON object)'),
    ({'task': 'tranlsation'}, '"task" is "tranlsation", not one of'),
    ({'task': None}, 'not an experiment config (no "task")'),
])
def test_mistyped_config_file_is_named_with_its_field(trained, tmp_path,
                                                      change, problem):
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  for section, value in change.items():
    if isinstance(value, dict) and isinstance(saved.get(section), dict):
      saved[section].update(value)
    else:
      saved[section] = value
  path.write_text(json.dumps(saved))
  message = f'{path} is damaged: {problem}'
  with pytest.raises(workdir_lib.DamagedFile) as error:
    workdir_lib.load_config(str(workdir))
  assert str(error.value).startswith(message)
  assert 'restore it from a copy, or train into a new --workdir' in str(
      error.value)
  # Resuming reads it too (a section that was not an object was taken for a
  # changed value and overwritten).
  with pytest.raises(workdir_lib.DamagedFile, match='is damaged'):
    train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  assert json.loads(path.read_text()) == saved  # left as it was


def test_config_file_of_an_older_version_is_read(trained, tmp_path):
  """Fields the config no longer has are ignored, missing ones default, and
  placeholders (the named size's value) may be null."""
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  saved['train']['a_removed_setting'] = [1, 2]
  saved['model']['num_heads'] = None
  del saved['eval']
  path.write_text(json.dumps(saved))
  config = workdir_lib.load_config(str(workdir))
  assert config.eval.beam_size == 4


def test_mistyped_config_file_ends_a_command_in_one_line(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  saved['model']['num_layers'] = 'two'
  path.write_text(json.dumps(saved))
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       f'--workdir={workdir}'], cwd=REPO, input='a dog\n', text=True,
      capture_output=True, timeout=300, env=ENV)
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f'Error: {path} is damaged: "model.num_layers" is "two", not a whole '
      f'number. Correct it, restore it from a copy, or train into a new '
      f'--workdir.')


@pytest.mark.parametrize('section', workdir_lib.REQUIRED_SECTIONS)
def test_config_file_without_a_section_is_named(trained, tmp_path, section):
  """Without its "model" section, the default model was restored (and
  orbax's 45 KB refusal followed)."""
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  del saved[section]
  path.write_text(json.dumps(saved))
  with pytest.raises(workdir_lib.DamagedFile) as error:
    workdir_lib.restore(str(workdir))
  assert str(error.value).startswith(
      f'{path} is damaged: no "{section}" section: the task\'s default '
      f'{section} settings would stand in for those the run had. Correct it')


@pytest.mark.parametrize('section, field, value, problem', [
    ('model', 'd_model', -32, 'd_model=-32 must be >= 1'),
    ('model', 'num_heads', 3, 'd_model=32 is not divisible by num_heads=3'),
    ('data', 'max_length', 1, 'config.data.max_length=1 must be >= 2'),
    ('eval', 'beam_size', 0, 'config.eval.beam_size=0 must be >= 1'),
])
def test_config_value_out_of_range_names_the_file(trained, tmp_path, section,
                                                  field, value, problem):
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  saved[section][field] = value
  path.write_text(json.dumps(saved))
  with pytest.raises(workdir_lib.DamagedFile) as error:
    workdir_lib.restore(str(workdir))
  assert str(error.value).startswith(f'{path} is damaged: {problem}')


@pytest.mark.parametrize('family,absent', [
    ('transformer', ('hidden_dim', 'kernel_size', 'bidirectional')),
    ('rnn', ('num_heads', 'd_ff', 'kernel_size', 'rope_theta')),
    ('convs2s', ('num_heads', 'bidirectional', 'attention_dim'))])
def test_config_json_keeps_the_chosen_familys_model_fields(tmp_path, family,
                                                           absent):
  config = load_experiment('mt_offline')
  config.model.family = family
  config.model.num_layers = 3
  workdir_lib.save_config(config, str(tmp_path))
  saved = json.loads((tmp_path / 'config.json').read_text())['model']
  assert saved['family'] == family and saved['num_layers'] == 3
  assert not set(absent) & set(saved)
  # The others come back as the defaults' placeholders: nothing changed.
  restored = workdir_lib.load_config(str(tmp_path))
  assert restored.model.to_dict() == config.model.to_dict()
  assert workdir_lib.config_changes(str(tmp_path), config) == {}
