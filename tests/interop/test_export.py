"""`convert --to=hf` refuses by name what it cannot write, before it
restores anything: another task's workdir, a full output directory, and a command line that
names no direction."""

import pytest

from conftest import fake_workdir
from conftest import raises_naming
from transformer.interop import export


@pytest.mark.parametrize('task', ['translation', 'vision_language'])
def test_a_task_without_a_hugging_face_model_is_refused(tmp_path, task):
  workdir = fake_workdir(tmp_path / 'w', task)
  with raises_naming(ValueError, f"{task!r} task", 'language_modeling',
                     'GPT-2 or Llama', 'BERT', 'ViT'):
    export.export(workdir, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_a_full_output_is_refused(tmp_path):
  workdir = fake_workdir(tmp_path / 'w', 'language_modeling')
  (tmp_path / 'out').mkdir()
  (tmp_path / 'out' / 'config.json').write_text('{}')
  with raises_naming(ValueError, 'out is not empty', 'new (or empty)'):
    export.export(workdir, str(tmp_path / 'out'))
  assert (tmp_path / 'out' / 'config.json').read_text() == '{}'
