"""`train.init_from` is checked before anything is built: the folder
exists, a run wrote it, it trained a task (and model family) this one
starts from, and it holds a checkpoint; each refusal names what the folder
is and what would fit, and nothing is written."""

import pytest

from conftest import fake_workdir
from conftest import load_experiment
from conftest import raises_naming
from transformer import tasks
from transformer import train


def _vqa(source):
  config = load_experiment('vilbert_vqa', 'runlocal')
  config.train.init_from = str(source)
  return config


def test_a_missing_folder_is_named_with_what_would_fit(tmp_path):
  with raises_naming(FileNotFoundError, f'init_from={tmp_path}/gone',
                     'does not exist', 'a vision_language or '
                     'visual_question_answering workdir'):
    tasks.check_init_from(_vqa(tmp_path / 'gone'))


def test_a_folder_no_run_wrote_is_not_a_workdir(tmp_path):
  with raises_naming(FileNotFoundError, 'config.json not found',
                     'not a training workdir', 'vision_language'):
    tasks.check_init_from(_vqa(tmp_path))


def test_a_run_of_another_task_is_named(tmp_path):
  """The user's case: a translation run given to VQA."""
  source = fake_workdir(tmp_path / 'mt', 'translation')
  with raises_naming(ValueError, "is a 'translation' workdir",
                     'visual_question_answering starts from a '
                     'vision_language'):
    tasks.check_init_from(_vqa(source))
  tasks.check_init_from(_vqa(fake_workdir(tmp_path / 'vl',
                                          'vision_language')))


def test_another_model_family_is_named_with_the_flag_that_fits(tmp_path):
  source = fake_workdir(tmp_path / 'mt', 'translation')
  config = load_experiment('mt_offline', 'runlocal')
  config.train.init_from = source
  tasks.check_init_from(config)  # the default family: transformer
  config.model.family = 'rnn'
  with raises_naming(ValueError, "trained a 'transformer' model",
                     '--config.model.family=transformer'):
    tasks.check_init_from(config)


def test_a_workdir_without_a_checkpoint_is_refused_and_nothing_written(
    tmp_path):
  source = fake_workdir(tmp_path / 'vl', 'vision_language')
  workdir = tmp_path / 'vqa'
  with raises_naming(FileNotFoundError, 'holds no checkpoint',
                     'train it first'):
    train.train_and_evaluate(_vqa(source), str(workdir))
  assert not workdir.exists()


@pytest.mark.parametrize('task', tasks.TASKS)
def test_every_task_starts_from_its_own_runs(task, tmp_path):
  config = tasks.default_config(task)
  config.train.init_from = fake_workdir(tmp_path / 'run', task)
  tasks.check_init_from(config)
