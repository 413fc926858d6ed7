"""The third trust pass's workdir cases, by class: a vocabulary that no
longer matches the checkpoints, checkpoints that change while a command
reads them, workdir paths and entries of the wrong kind, and a vocabulary
that records what it was built from. (Its other cases: the checkpoint
folder replaced mid-run in test_checkpoint_faults.py, signals outside the
training steps in test_faults.py, a config refused before anything is
written in test_train.py, config.json's sections and values in
test_workdir_files.py.)"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import copy_of
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import checkpoints
from transformer import configs
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import tokenization
from transformer.data.generated import offline_mt

ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
EXPERIMENT = os.path.join(REPO, 'experiments', 'mt_offline.py:runlocal')


def error_lines(stderr):
  return [line for line in stderr.splitlines() if line.startswith('Error:')]


# -- A vocabulary that no longer matches the checkpoints (#47, #48) ----------


def other_vocabulary(workdir, pieces=200):
  """Replaces the workdir's spm.model with another valid one of `pieces`."""
  sentences = [s for pair in offline_mt.splits(300, 1, 1, seed=7)['train']
               for s in pair]
  tokenization.train_sentencepiece(sentences, str(workdir / 'vocab' /
                                                'spm.model'), pieces)
  return tokenization.SentencePieceTokenizer(
      str(workdir / 'vocab' / 'spm.model')).vocab_size


def test_replaced_vocabulary_is_named_by_the_inference_restore(trained,
                                                               tmp_path):
  workdir = copy_of(trained, tmp_path)
  size = other_vocabulary(workdir)
  with pytest.raises(checkpoints.IncompatibleCheckpoint) as error:
    workdir_lib.restore(str(workdir))
  message = str(error.value)
  assert f'{workdir}/vocab/spm.model' in message
  assert f'has {size} tokens' in message and '300' in message
  assert 'Changed fields' not in message


def test_replaced_vocabulary_ends_translate_in_one_line(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  other_vocabulary(workdir)
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       f'--workdir={workdir}'], cwd=REPO, input='a dog\n', text=True,
      capture_output=True, timeout=300, env=ENV)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert 'Exception ignored' not in result.stderr
  [error] = error_lines(result.stderr)
  assert f'{workdir}/vocab/spm.model' in error


def test_replaced_vocabulary_is_named_on_resume(trained, tmp_path):
  workdir = copy_of(trained, tmp_path)
  size = other_vocabulary(workdir)
  with pytest.raises(checkpoints.IncompatibleCheckpoint) as error:
    train.train_and_evaluate(tiny_config(steps=6), str(workdir))
  message = str(error.value)
  assert f'{workdir}/vocab/spm.model' in message
  assert f'has {size} tokens' in message
  assert 'Changed fields: none' not in message


# -- Checkpoints that change while a command reads them (#8, #14, #16) -------


@pytest.fixture
def trainer_deletes(monkeypatch):
  """Each read of a checkpoint's data first deletes its folder, as a
  training run's `keep_checkpoints` does, `times` times in all."""
  left = {'times': 0}
  original = checkpoints.Manager.restore

  def restore(self, step, *args, **kwargs):
    if left['times'] > 0:
      left['times'] -= 1
      shutil.rmtree(os.path.join(os.fspath(self.directory), str(step)))
    return original(self, step, *args, **kwargs)

  monkeypatch.setattr(checkpoints.Manager, 'restore', restore)
  return left


def test_a_checkpoint_deleted_while_read_is_listed_again(
    trained, tmp_path, trainer_deletes, capsys):
  workdir = copy_of(trained, tmp_path)
  trainer_deletes['times'] = 1
  restored = workdir_lib.restore(str(workdir))
  assert restored.step == 2  # 4 went; the listing again found 2
  out = capsys.readouterr().out
  assert 'unverified' not in out and 'damaged' not in out


def test_checkpoints_changing_twice_name_the_run_training(
    trained, tmp_path, trainer_deletes):
  workdir = copy_of(trained, tmp_path)
  (workdir / 'run.lock').write_text('host h, pid 99, since 2024-01-01T00:00')
  trainer_deletes['times'] = 2
  with pytest.raises(checkpoints.CheckpointsChanged) as error:
    workdir_lib.restore(str(workdir))
  message = str(error.value)
  assert f'The checkpoints of {workdir} changed while they were read' in (
      message)
  assert 'being trained' in message and 'host h, pid 99' in message
  assert 'Rerun the command' in message
  assert not isinstance(error.value, FileNotFoundError)  # not missing input


def test_averaging_names_the_checkpoints_averaged(trained, tmp_path, capsys,
                                                  trainer_deletes):
  workdir = copy_of(trained, tmp_path)
  restored = workdir_lib.restore(str(workdir), average=2)
  assert restored.step == 4
  assert 'Averaged 2 checkpoints (steps 2, 4).' in capsys.readouterr().out
  trainer_deletes['times'] = 1  # the oldest, 2, goes while it is read
  restored = workdir_lib.restore(str(workdir), average=2)
  assert restored.step == 4
  out = capsys.readouterr().out
  assert 'Averaged 1 checkpoint (step 4) of the 2 asked for.' in out
  assert 'damaged' not in out


# -- Workdir paths and entries of the wrong kind (#34, #118, #44, #83) -------


def test_an_empty_workdir_is_refused_before_anything_is_written(tmp_path,
                                                              monkeypatch):
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.main', f'--config={EXPERIMENT}',
       '--workdir='], cwd=tmp_path, env=ENV, capture_output=True, text=True,
      timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  [error] = error_lines(result.stderr)
  assert error.startswith('Error: --workdir is empty')
  assert os.listdir(tmp_path) == []
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match='empty'):
    train.train_and_evaluate(tiny_config(), '')
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('experiment, arg', [
    ('sst2', 'runlocal,init_from='), ('sst2', 'init_from'),
    ('glue', 'task=rte,runlocal,init_from='),
    ('vit_finetune', 'init_from=,runlocal')])
def test_an_empty_init_from_is_refused_naming_it(experiment, arg):
  with pytest.raises(ValueError) as error:
    configs.load_experiment(os.path.join(REPO, 'experiments',
                                         f'{experiment}.py:{arg}'))
  message = str(error.value)
  assert message.startswith(
      f'experiments/{experiment}.py: init_from is empty')
  assert 'init_from=WORKDIR' in message


@pytest.mark.parametrize('entry, make, expected', [
    ('run.lock', 'folder', 'is a folder, not the lock file'),
    ('cache', 'file', 'is a file, not the token cache folder'),
    ('checkpoints', 'file', 'is a file, not the checkpoints folder'),
    ('config.json', 'folder', 'is a folder, not the config file'),
])
def test_a_workdir_entry_of_the_wrong_kind_is_named(tmp_path, entry, make,
                                                    expected):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  if make == 'folder':
    (workdir / entry).mkdir()
  else:
    (workdir / entry).write_text('')
  with pytest.raises(OSError) as error:
    train.train_and_evaluate(tiny_config(), str(workdir))
  message = str(error.value)
  assert message.startswith(f'{workdir / entry} {expected}')
  assert 'remove' in message or 'move' in message
  assert '[Errno' not in message
  assert sorted(os.listdir(workdir)) == [entry]  # nothing written


# -- The vocabulary records what it was built from (#130, #129) --------------


def vocabulary_of(workdir):
  return (workdir / 'vocab' / 'spm.model').read_bytes()


def test_a_vocabulary_built_from_other_settings_is_rebuilt(tmp_path, capfd):
  # capfd: SentencePiece's trainer needs the file descriptor of stderr.
  """A refused or killed run left a vocabulary and no checkpoint: the next
  run with another vocabulary size or other data builds its own."""
  workdir = tmp_path / 'run'
  train.Trainer(tiny_config(), str(workdir))  # killed before step 1
  first = vocabulary_of(workdir)
  smaller = configs.override(tiny_config(), {'data.vocab_size': 250})
  trainer = train.Trainer(smaller, str(workdir))
  assert trainer.task.tokenizer.vocab_size == 250
  out = capfd.readouterr().out
  assert (f'Rebuilding the vocabulary in {workdir}/vocab: it was built with '
          f'data.vocab_size=300 (this run: 250)') in out
  other_data = configs.override(smaller, {'data.seed': 5})
  train.Trainer(other_data, str(workdir))
  assert 'data.seed=0 (this run: 5)' in capfd.readouterr().out
  assert vocabulary_of(workdir) != first
  same = vocabulary_of(workdir)
  train.Trainer(other_data, str(workdir))  # the same settings: reused
  assert vocabulary_of(workdir) == same
  assert 'Rebuilding' not in capfd.readouterr().out


def test_a_vocabulary_with_checkpoints_refuses_other_settings(trained,
                                                              tmp_path):
  workdir = copy_of(trained, tmp_path)
  os.remove(workdir / 'config.json')  # only the vocabulary's record is left
  config = configs.override(tiny_config(steps=6), {'data.vocab_size': 250})
  with pytest.raises(checkpoints.IncompatibleCheckpoint,
                     match=r'data.vocab_size: 300 -> 250'):
    train.train_and_evaluate(config, str(workdir))
  # Other data with the same vocabulary: the checkpoints go on training.
  train.train_and_evaluate(configs.override(tiny_config(steps=6),
                                            {'data.seed': 3}), str(workdir))


def test_the_vocabulary_record_is_checked_against_its_schema(tmp_path):
  workdir = tmp_path / 'run'
  train.Trainer(tiny_config(), str(workdir))
  record = workdir / 'vocab_built_from.json'
  assert json.loads(record.read_text())['data.vocab_size'] == 300
  record.write_text('[1, 2]')
  with pytest.raises(workdir_lib.DamagedFile,
                     match='vocab_built_from.json is damaged: not a JSON '
                     'object'):
    train.Trainer(tiny_config(), str(workdir))
