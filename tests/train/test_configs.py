"""configs.py: experiment files, overrides, and model sections derived from
the model dataclasses (no hand-kept tables of fields)."""

import dataclasses
import os

import pytest

from conftest import raises_naming
from conftest import REPO
from transformer import configs
from transformer import tasks
from transformer.models import captioning
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import rnn
from transformer.models import vit
from transformer.tasks import image_classification
from transformer.tasks import language_modeling
from transformer.tasks import translation


def test_load_experiment_from_the_repository_root_or_a_path(tmp_path,
                                                            monkeypatch):
  monkeypatch.chdir(tmp_path)  # a relative path falls back to the repository
  relative = configs.load_experiment('experiments/mt_offline.py:runlocal')
  absolute = configs.load_experiment(
      os.path.join(REPO, 'experiments', 'mt_offline.py') + ':runlocal')
  assert relative == absolute and relative.train.num_steps == 20
  assert configs.load_experiment('experiments/mt_offline.py').train.num_steps \
      == 3_000
  with raises_naming(FileNotFoundError, 'experiments/no_such.py',
                     'mt_offline'):
    configs.load_experiment('experiments/no_such.py')


def test_assignments_parse_as_on_the_command_line():
  assert configs.parse_assignments('a.b=3,c=x,d=0.5,e=True,f=None') == {
      'a.b': 3, 'c': 'x', 'd': 0.5, 'e': True, 'f': None}
  assert configs.parse_assignments('') == {}
  with raises_naming(ValueError, "'a.b'", 'field=value'):
    configs.parse_assignments('a.b')


def test_override_takes_text_or_a_mapping_and_refuses_unknown_fields():
  config = configs.load_experiment('experiments/mt_offline.py:runlocal')
  by_text = configs.override(config, 'model.num_heads=2,data.source=local')
  by_mapping = configs.override(config, {'model.num_heads': 2,
                                         'data.source': 'local'})
  assert by_text == by_mapping and by_text.model.num_heads == 2
  assert config.model.num_heads is None  # the original is untouched
  for field in ('model.no_such', 'no_such.field', 'seed.deeper'):
    with pytest.raises(configs.UnknownField, match=field):
      configs.override(config, {field: 1})


@pytest.mark.parametrize('task,model_class,exclude', [
    ('translation', encoder_decoder.Config, translation.MODEL_EXCLUDE),
    ('translation', rnn.Config, translation.MODEL_EXCLUDE),
    ('language_modeling', decoder.Config, language_modeling.MODEL_EXCLUDE),
    ('masked_language_modeling', encoder.Config, ('vocab_size', 'max_length',
                                                  'num_classes')),
    ('text_classification', encoder.Config, ('vocab_size', 'max_length',
                                             'num_classes')),
    ('image_classification', vit.Config, image_classification.MODEL_EXCLUDE),
    ('captioning', captioning.Config, ('vocab_size', 'max_length',
                                       'image_size', 'num_channels')),
])
def test_every_model_field_is_a_config_field(task, model_class, exclude):
  """What the model dataclass has, the config can set: the fields the task
  sets from its data and the decode mode excepted; nothing else."""
  section = tasks.default_config(task).model
  for field in dataclasses.fields(model_class):
    if field.name == 'dtype':  # the section's own: a name, 'float32'
      continue
    simple = field.type in ('int', 'float', 'str', 'bool') or (
        field.type.endswith('| None') and field.type.split()[0] in (
            'int', 'float', 'str', 'bool'))
    expected = simple and field.name not in (*exclude, 'decode')
    assert (field.name in section) == expected, field.name
    if expected:
      assert section[field.name] is None  # the named size decides
  assert {'size', 'dtype'} <= set(section)


def test_a_new_model_field_needs_no_table():
  @dataclasses.dataclass(frozen=True)
  class Config(decoder.Config):
    window: int | None = None  # a field added to a model
    ratio: float = 0.5

  section = configs.model_section(Config, exclude=('vocab_size',),
                                  size='tiny')
  assert 'window' in section and 'ratio' in section
  assert 'vocab_size' not in section and 'decode' not in section
  section.window = 64  # typed: a command-line value parses as an int
  assert configs.model_overrides(section, Config) == {'window': 64}
  assert configs.model_values(Config(ratio=0.25), section)['ratio'] == 0.25


def test_a_field_of_the_other_family_is_refused():
  config = configs.load_experiment('experiments/mt_offline.py:runlocal')
  config.model.hidden_dim = 64  # an RNN field on the Transformer
  with raises_naming(ValueError, "['hidden_dim']", "'transformer'",
                     'remove'):
    translation.model_config(config, 100)
