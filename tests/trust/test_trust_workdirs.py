"""The third trust pass's workdir cases, by class: a vocabulary that no
longer matches the checkpoints, checkpoints that change while a command
reads them, workdir paths and entries of the wrong kind, and a vocabulary
that records what it was built from; those that need a trained workdir or
a process: e2e/test_trust_workdirs_e2e.py. (Its other cases, in
tests/train: the checkpoint folder replaced mid-run in
e2e/test_checkpoint_faults.py, signals outside the training steps in
e2e/test_faults_e2e.py, a config refused before anything is written in
test_train.py, config.json's sections and values in
e2e/test_workdir_files_e2e.py.)"""

import json
import os

import pytest

from conftest import raises_naming
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import configs
from transformer import train
from transformer import workdir as workdir_lib


# -- Workdir paths and entries of the wrong kind (#34, #118, #44, #83) -------


@pytest.mark.parametrize('experiment, arg', [
    ('sst2', 'runlocal,init_from='), ('sst2', 'init_from'),
    ('glue', 'task=rte,runlocal,init_from='),
    ('vit_finetune', 'init_from=,runlocal')])
def test_an_empty_init_from_is_refused_naming_it(experiment, arg):
  with pytest.raises(ValueError) as error:
    configs.load_experiment(os.path.join(REPO, 'experiments',
                                         f'{experiment}.py:{arg}'))
  message = str(error.value)
  assert f'experiments/{experiment}.py' in message
  assert 'init_from is empty' in message and 'init_from=WORKDIR' in message


@pytest.mark.parametrize('entry, make, names', [
    ('run.lock', 'folder', ('is a folder', 'lock file')),
    ('cache', 'file', ('is a file', 'token cache folder')),
    ('checkpoints', 'file', ('is a file', 'checkpoints folder')),
    ('config.json', 'folder', ('is a folder', 'config file')),
])
def test_a_workdir_entry_of_the_wrong_kind_is_named(tmp_path, entry, make,
                                                    names):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  if make == 'folder':
    (workdir / entry).mkdir()
  else:
    (workdir / entry).write_text('')
  with pytest.raises(OSError) as error:
    train.train_and_evaluate(tiny_config(), str(workdir))
  message = str(error.value)
  for name in (str(workdir / entry), *names):
    assert name in message, message
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


def test_the_vocabulary_record_is_checked_against_its_schema(tmp_path):
  workdir = tmp_path / 'run'
  train.Trainer(tiny_config(), str(workdir))
  record = workdir / 'vocab_built_from.json'
  assert json.loads(record.read_text())['data.vocab_size'] == 300
  record.write_text('[1, 2]')
  with raises_naming(workdir_lib.DamagedFile, str(record), 'JSON object'):
    train.Trainer(tiny_config(), str(workdir))
