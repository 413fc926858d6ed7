"""The one registry of data sources (`data.sources`): every task reads its
examples through it, every experiment's source is registered for its kind,
and a new source serves every task of its kind."""

import json

import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import configs
from transformer import tasks
from transformer.data import sources

# The kind each task reads.
KINDS = {'translation': 'pairs', 'language_modeling': 'documents',
         'masked_language_modeling': 'documents',
         'text_classification': 'labelled_text', 'captioning': 'captions',
         'image_classification': 'images', 'vision_language': 'captions',
         'visual_question_answering': 'scenes',
         'referring_expressions': 'scenes'}


def test_every_task_declares_the_kind_it_reads():
  import importlib  # pylint: disable=g-import-not-at-top
  assert {task: importlib.import_module(f'transformer.tasks.{task}').DATA_KIND
          for task in tasks.TASKS} == KINDS


def test_every_kind_has_its_sources():
  assert {kind: sources.names(kind) for kind in sources.READERS} == {
      'pairs': ('offline', 'local', 'tfds'),
      'documents': ('offline', 'tfds', 'local'),
      'labelled_text': ('offline', 'tsv', 'tfds'),
      'captions': ('offline', 'folder', 'tfds'),
      'images': ('offline', 'mnist', 'folder', 'tfds'),
      'scenes': ('offline',)}


def test_every_tasks_default_source_is_registered_for_its_kind():
  assert set(KINDS) == set(tasks.TASKS)
  for name, kind in KINDS.items():
    assert tasks.default_config(name).data.source in sources.names(kind)


# Arguments the experiments need (the fine-tuning experiments' configs are
# a trained workdir's: test_image_classification builds vit_finetune's,
# tasks/e2e/test_lm_finetune_e2e.py lm_finetune's).
NEEDS = {'mt_local': 'src=a.de,tgt=a.en'}
FROM_A_WORKDIR = ('vit_finetune', 'lm_finetune')


@pytest.mark.parametrize('name', [
    name for name in configs.experiment_names()
    if not name.startswith('paper/') and name not in FROM_A_WORKDIR])
def test_every_experiments_source_is_registered(name):
  config = load_experiment(name, NEEDS.get(name, ''))
  assert config.data.source in sources.names(KINDS[config.task]), name


def test_an_override_the_source_would_ignore_is_refused():
  """`--config.data.path` on the generated corpus would train on the
  corpus and leave the path out of config.json: refused, naming the source
  that reads it; the advice given is accepted."""
  config = load_experiment('lm_offline', 'runlocal')
  config.data.path = 'input.txt'
  overrides = {'data.path': 'input.txt', 'train.num_steps': 3}
  with raises_naming(ValueError, "config.data.source='offline'",
                     'config.data.path', 'config.data.source: local'):
    tasks.check_data_fields(config, overrides)
  config.data.source = 'local'
  tasks.check_data_fields(config, {**overrides, 'data.source': 'local'})
  # A source's own fields and the fields no source claims are read.
  config = load_experiment('lm_offline', 'runlocal')
  tasks.check_data_fields(config, {'data.num_train': 5,
                                   'data.tokens_per_batch': 64})


def test_an_unknown_source_names_the_kinds_choices():
  config = load_experiment('mt_offline')
  config.data.source = 'ftp'
  with raises_naming(ValueError, "config.data.source='ftp'",
                     "('offline', 'local', 'tfds')", '(pairs)'):
    sources.read('pairs', config.data, 'train')


def test_a_source_is_registered_once():
  with pytest.raises(ValueError, match='registered twice'):
    sources.register('pairs', 'offline')(lambda data, split: [])


def test_a_new_source_serves_every_task_of_its_kind(tmp_path, monkeypatch):
  read = []

  def memory(data, split):
    read.append(split)
    return [('a b', 'x y'), ('b a', 'y x')]

  monkeypatch.setitem(sources.READERS['pairs'], 'memory', memory)
  config = load_experiment('mt_offline', 'runlocal')
  config.data.source = 'memory'
  task = tasks.build(config, str(tmp_path))
  assert task.pairs('train') == [('a b', 'x y'), ('b a', 'y x')]
  assert read == ['train']


def test_generated_glue_tasks_and_file_tasks_name_their_source():
  config = load_experiment('glue', 'task=entailment,runlocal')
  assert config.data.source == 'offline'
  rows = sources.read('labelled_text', config.data, 'train')
  assert rows and all(b is not None for _, b, _ in rows)
  config.data.source = 'tsv'
  with raises_naming(ValueError, "config.data.glue_task='entailment'",
                     "config.data.source='offline'"):
    sources.read('labelled_text', config.data, 'train')
  config.data.update(source='offline', glue_task='rte')
  with raises_naming(ValueError, "config.data.glue_task='rte'", "'tsv'",
                     "'tfds'"):
    sources.read('labelled_text', config.data, 'train')


def test_a_source_declares_the_fields_only_it_reads():
  config = load_experiment('mt_offline')
  kept = sources.in_use('pairs', config.data)
  assert {'num_train', 'max_clauses'} <= set(kept)
  assert not {'path', 'tfds_name', 'tfds_data_dir'} & set(kept)
  config.data.update(source='local', path='/corpus')
  kept = sources.in_use('pairs', config.data)
  assert kept.path == '/corpus' and 'num_train' not in kept
  # Fields no source claims (the tokenizer, batches) stay whatever the
  # source.
  assert {'tokenizer', 'max_length', 'tokens_per_batch', 'seed'} <= set(kept)


def test_config_json_keeps_the_sources_fields_and_restores_the_rest(
    tmp_path):
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  config = load_experiment('mt_local', 'src=de,tgt=en')
  config.data.num_train = 7  # read by no local source: not kept
  workdir_lib.save_config(config, str(tmp_path))
  saved = json.loads((tmp_path / 'config.json').read_text())['data']
  assert saved['path'] == config.data.path and 'num_train' not in saved
  assert 'tfds_name' not in saved
  restored = workdir_lib.load_config(str(tmp_path))
  assert restored.data.path == config.data.path
  assert restored.data.num_train == tasks.default_config(
      'translation').data.num_train
  assert workdir_lib.config_changes(str(tmp_path), config) == {}
  config.data.path = '/elsewhere'
  assert workdir_lib.config_changes(str(tmp_path), config) == {
      'data.path': (saved['path'], '/elsewhere')}
  # A config.json written before kept every field: the same comparison.
  config.data.path = saved['path']
  (tmp_path / 'config.json').write_text(config.to_json_best_effort())
  assert workdir_lib.config_changes(str(tmp_path), config) == {}
