"""The workdir's own files (config.json, progress.json, run.lock) are
checked against their schema whenever they are read (`workdir.SCHEMAS`): a
damaged or mistyped one is named with its field, never a traceback, a codec
error or a value used silently. (Those of a trained workdir, and the
commands that read them: e2e/test_workdir_files_e2e.py.)"""

import json
import os

import pytest

from conftest import load_experiment
from transformer import workdir as workdir_lib

# -- run.lock -----------------------------------------------------------------


def test_binary_run_lock_is_named_and_taken_over(tmp_path, capsys):
  (tmp_path / 'run.lock').write_bytes(b'\xff\xfe\x00\x01garbage\x80')
  with workdir_lib.lock(str(tmp_path)):
    held = (tmp_path / 'run.lock').read_text()
  out = capsys.readouterr().out
  assert f'{tmp_path}/run.lock' in out and 'not UTF-8 text' in out
  assert 'byte 0 is 0xff' in out and 'takes it over' in out
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


def test_run_lock_of_another_format_is_named(tmp_path, capsys):
  (tmp_path / 'run.lock').write_text('locked by the night shift')
  with workdir_lib.lock(str(tmp_path)):
    pass
  out = capsys.readouterr().out
  assert f'{tmp_path}/run.lock' in out and 'holder record' in out
  assert "'locked by the night shift'" in out


# -- progress.json ------------------------------------------------------------


@pytest.mark.parametrize('content, names', [
    ('{"step": true, "tokens": 5}', ('"step" is true', 'whole number >= 0')),
    ('{"step": "4", "tokens": 5}', ('"step" is "4"', 'whole number >= 0')),
    ('{"step": -4}', ('"step" is -4', 'whole number >= 0')),
    ('{"step": 4.5}', ('"step" is 4.5', 'whole number >= 0')),
    ('{"step": 4, "tokens": NaN}', ('"tokens" is NaN', 'finite number')),
    ('{"step": 4, "tokens": [1, 2]}',
     ('"tokens" is [1, 2]', 'finite number >= 0')),
    ('{"step": 4, "train_seconds": -3.0}',
     ('"train_seconds" is -3.0', 'finite number >= 0')),
    ('{"tokens": 5}', ('no "step"',)),
    ('[4, 5]', ('JSON object', 'list')),
    (b'\x80\x81', ('UTF-8', 'byte 0 is 0x80')),
])
def test_mistyped_progress_file_is_named_with_its_field(tmp_path, capsys,
                                                        content, names):
  path = tmp_path / 'progress.json'
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content)
  assert workdir_lib.load_progress(str(tmp_path)) == {}
  out = capsys.readouterr().out
  for name in (str(path), *names):
    assert name in out
  assert 'the checkpoints are unaffected' in out


def test_progress_file_of_the_right_types_is_read(tmp_path, capsys):
  progress = {'step': 4, 'tokens': 1200.0, 'train_seconds': 3.5, 'images': 0}
  (tmp_path / 'progress.json').write_text(json.dumps(progress))
  assert workdir_lib.load_progress(str(tmp_path)) == progress
  assert not capsys.readouterr().out


# -- config.json --------------------------------------------------------------


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
