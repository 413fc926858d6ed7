"""The workdir's own files (config.json, progress.json, run.lock) are
checked against their schema whenever they are read (`workdir.SCHEMAS`): a
damaged or mistyped one is named with its field, never a traceback, a codec
error or a value used silently. Here: a lock held by another process, and
the config.json of a trained workdir read by a resume, a restore or a
command."""

import json
import os
import subprocess
import sys

import pytest

from conftest import copy_of
from conftest import raises_naming
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import train
from transformer import workdir as workdir_lib

ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu'}


# -- run.lock -----------------------------------------------------------------

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
    with raises_naming(workdir_lib.WorkdirBusy, str(tmp_path),
                       f'{tmp_path}/run.lock', 'not UTF-8 text', 'byte 1',
                       '--workdir'):
      with workdir_lib.lock(str(tmp_path)):
        pass
  finally:
    holder.kill()
    holder.wait()


# -- config.json --------------------------------------------------------------


@pytest.mark.parametrize('change, names', [
    ({'train': {'num_steps': 'ten'}},
     ('"train.num_steps" is "ten"', 'whole number')),
    ({'train': {'num_steps': 1.5}},
     ('"train.num_steps" is 1.5', 'whole number')),
    ({'train': {'num_steps': None}},
     ('"train.num_steps" is null', 'whole number')),
    ({'model': {'num_heads': True}},
     ('"model.num_heads" is true', 'whole number')),
    ({'optimizer': {'learning_rate': '1e-3'}},
     ('"optimizer.learning_rate" is "1e-3"', 'a number')),
    ({'data': {'packing': 1}}, ('"data.packing" is 1', 'true or false')),
    ({'eval': 5}, ('"eval" is 5', 'section')),
    ({'model': ['d_model', 32]}, ('"model" is ["d_model", 32]', 'section')),
    ({'task': 'tranlsation'}, ('"task" is "tranlsation"', 'translation')),
    ({'task': None}, ('no "task"',)),
])
def test_mistyped_config_file_is_named_with_its_field(trained, tmp_path,
                                                      change, names):
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  for section, value in change.items():
    if isinstance(value, dict) and isinstance(saved.get(section), dict):
      saved[section].update(value)
    else:
      saved[section] = value
  path.write_text(json.dumps(saved))
  with raises_naming(workdir_lib.DamagedFile, str(path), *names,
                     '--workdir'):
    workdir_lib.load_config(str(workdir))
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
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('Error: ') and str(path) in last
  assert '"model.num_layers" is "two"' in last and 'whole number' in last
  assert '--workdir' in last


@pytest.mark.parametrize('section', workdir_lib.REQUIRED_SECTIONS)
def test_config_file_without_a_section_is_named(trained, tmp_path, section):
  """Without its "model" section, the default model was restored (and
  orbax's 45 KB refusal followed)."""
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  del saved[section]
  path.write_text(json.dumps(saved))
  with raises_naming(workdir_lib.DamagedFile, str(path),
                     f'no "{section}" section', '--workdir'):
    workdir_lib.restore(str(workdir))


@pytest.mark.parametrize('section, field, value, names', [
    ('model', 'd_model', -32, ('d_model=-32', '>= 1')),
    ('model', 'num_heads', 3, ('d_model=32', 'num_heads=3', 'head_dim')),
    ('data', 'max_length', 1, ('config.data.max_length=1', '>= 2')),
    ('eval', 'beam_size', 0, ('config.eval.beam_size=0', '>= 1')),
])
def test_config_value_out_of_range_names_the_file(trained, tmp_path, section,
                                                  field, value, names):
  workdir = copy_of(trained, tmp_path)
  path = workdir / 'config.json'
  saved = json.loads(path.read_text())
  saved[section][field] = value
  path.write_text(json.dumps(saved))
  with raises_naming(workdir_lib.DamagedFile, str(path), *names):
    workdir_lib.restore(str(workdir))
