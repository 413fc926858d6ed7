"""Reliability, the settings refused before a run trains: unwritable
workdirs, evaluation settings, the non-finite policy. Preemption and exact
resume, damaged checkpoints, config changes on resume and non-finite steps
in runs: e2e/test_faults_e2e.py."""

import os

import pytest

from conftest import raises_naming
from conftest import tiny_training_config as tiny_config
from transformer import tasks
from transformer import train


def test_unwritable_workdir_is_refused_before_building(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')
  with raises_naming(OSError, f'{blocker}/run', '--workdir'):
    train.train_and_evaluate(tiny_config(), str(blocker / 'run'))


@pytest.mark.parametrize('task, field, value, names', [
    ('translation', 'beam_size', 0, ('config.eval.beam_size=0', '>= 1')),
    ('translation', 'length_penalty', -0.6,
     ('config.eval.length_penalty=-0.6', '>= 0')),
    ('translation', 'average_checkpoints', 0,
     ('config.eval.average_checkpoints=0', '>= 1')),
    ('translation', 'max_length_offset', -5,
     ('config.eval.max_length_offset=-5', '>= 0')),
    ('translation', 'bleu_tokenize', 'words',
     ("config.eval.bleu_tokenize='words'", 'none, zh, 13a')),
    ('captioning', 'beam_size', 0, ('config.eval.beam_size=0', '>= 1')),
    ('captioning', 'num_plots', -1, ('config.eval.num_plots=-1', '>= 0')),
    ('language_modeling', 'max_new_tokens', 0,
     ('config.eval.max_new_tokens=0', '>= 1')),
    ('language_modeling', 'temperature', 0.0,
     ('config.eval.temperature=0.0', '> 0')),
    ('language_modeling', 'top_p', 1.5, ('config.eval.top_p=1.5', '(0, 1]')),
    ('language_modeling', 'top_k', -1, ('config.eval.top_k=-1', '>= 0')),
    ('language_modeling', 'prompts', ('The', 3),
     ("config.eval.prompts=('The', 3)", 'list of strings')),
    ('vision_language', 'retrieval_images', -1,
     ('config.eval.retrieval_images=-1', '>= 0')),
    ('visual_question_answering', 'num_plots', -2,
     ('config.eval.num_plots=-2', '>= 0')),
])
def test_evaluation_settings_are_checked_before_anything_is_built(
    task, field, value, names, tmp_path):
  config = tasks.default_config(task)
  config.eval[field] = value
  with raises_naming(ValueError, *names):
    tasks.build(config, str(tmp_path))
  assert not os.listdir(tmp_path)  # before any data or vocabulary


def test_unknown_nonfinite_policy_is_refused(tmp_path):
  config = tiny_config()
  config.train.nonfinite = 'ignore'
  with raises_naming(ValueError, "config.train.nonfinite='ignore'",
                     "'stop', 'skip'"):
    train.train_and_evaluate(config, str(tmp_path))
