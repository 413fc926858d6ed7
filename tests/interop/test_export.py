"""`convert --to=hf` refuses by name what it cannot write, before it
restores anything: another task's workdir, a translation model of another
family than Marian's, a full output directory, and a command line that
names no direction."""

import pytest

from conftest import fake_workdir
from conftest import raises_naming
from transformer.interop import export


@pytest.mark.parametrize('task', ['vision_language', 'captioning'])
def test_a_task_without_a_hugging_face_model_is_refused(tmp_path, task):
  workdir = fake_workdir(tmp_path / 'w', task)
  with raises_naming(ValueError, f"{task!r} task", 'language_modeling',
                     'GPT-2 or Llama', 'BERT', 'ViT', 'Marian'):
    export.export(workdir, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('family', ['rnn', 'convs2s'])
def test_a_translation_model_marian_cannot_compute_is_refused(tmp_path,
                                                              family):
  """No checkpoint is there: the refusal comes before the restore."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  config = tasks.default_config('translation')
  config.model.family, config.model.size = family, 'tiny'
  (tmp_path / 'w').mkdir()
  (tmp_path / 'w' / 'config.json').write_text(config.to_json_best_effort())
  with raises_naming(ValueError, f"{family!r} translation model", 'Marian',
                     "model.family='transformer'"):
    export.export(str(tmp_path / 'w'), str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_a_full_output_is_refused(tmp_path):
  workdir = fake_workdir(tmp_path / 'w', 'language_modeling')
  (tmp_path / 'out').mkdir()
  (tmp_path / 'out' / 'config.json').write_text('{}')
  with raises_naming(ValueError, 'out is not empty', 'new (or empty)'):
    export.export(workdir, str(tmp_path / 'out'))
  assert (tmp_path / 'out' / 'config.json').read_text() == '{}'
