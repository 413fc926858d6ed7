"""The third trust pass's workdir cases, by class: a vocabulary that no
longer matches the checkpoints, checkpoints that change while a command
reads them, workdir paths and entries of the wrong kind, and a vocabulary
that records what it was built from: the cases that need a trained workdir
or a process (the others: ../test_trust_workdirs.py). (Its other cases, in
tests/train: the checkpoint folder replaced mid-run in
e2e/test_checkpoint_faults.py, signals outside the training steps in
e2e/test_faults_e2e.py, a config refused before anything is written in
test_train.py, config.json's sections and values in
e2e/test_workdir_files_e2e.py.)"""

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
  assert str(workdir) in message and 'changed' in message
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
  assert error.startswith('Error: ') and 'empty' in error
  assert '--workdir=' in error  # what to give
  assert os.listdir(tmp_path) == []
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match='empty'):
    train.train_and_evaluate(tiny_config(), '')
  assert os.listdir(tmp_path) == []


# -- The vocabulary records what it was built from (#130, #129) --------------


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
