"""BERT end to end: MLM pretraining, then fine-tuned classification, and
fine-tuning from other workdirs."""

import shutil

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import train
from transformer import workdir as workdir_lib
from transformer.insight import attention_views


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory):
  config = load_experiment('bert_mlm', 'runlocal')
  config.train.num_steps = 12
  config.train.eval_every = 12
  workdir = str(tmp_path_factory.mktemp('mlm'))
  result = train.train_and_evaluate(config, workdir)
  return config, workdir, result


def test_mlm_training_lowers_loss(pretrained):
  config, workdir, result = pretrained
  trainer = train.Trainer(config, workdir)
  sums = None
  for batch in trainer.task.eval_batches():
    step = trainer.eval_step(trainer.initialise().params, batch)
    sums = step if sums is None else jax.tree.map(lambda a, b: a + b, sums,
                                                  step)
  initial = float(sums['loss'][0] / sums['loss'][1])
  assert result['loss'] < initial - 0.1
  assert 0.0 <= result['mlm_accuracy'] <= 1.0


def test_encoder_attention_view_masks_nothing_and_sums_to_one(pretrained):
  _, workdir, _ = pretrained
  restored = workdir_lib.restore(workdir)
  task = restored.task
  with restored.active():
    [view] = attention_views.of(task, restored.params, 'the film was good')
  ids = task.tokenizer.encode('the film was good', add_eos=False)
  assert view.queries == view.keys and view.queries[0] == '[CLS]'
  assert len(view.queries) == len(ids) + 1
  layers_ = task.model_config.num_layers
  assert view.weights.shape == (layers_, task.model_config.num_heads,
                                len(ids) + 1, len(ids) + 1)
  np.testing.assert_allclose(view.weights.sum(-1), 1.0, atol=1e-5)
  # Bidirectional: the first token attends to the last one, unlike GPT.
  assert (view.weights[:, :, 0, -1] > 0).all()


def test_fine_tuning_starts_from_the_pretrained_encoder(pretrained, tmp_path):
  pretrained_config, mlm_workdir, _ = pretrained
  source = str(tmp_path / 'mlm')
  shutil.copytree(mlm_workdir, source)
  config = load_experiment('sst2', f'init_from={source},runlocal')
  # The experiment takes the pretrained sizes and context into its config.
  assert config.model.d_model == pretrained_config.model.d_model
  assert config.data.max_length == pretrained_config.data.max_length
  config.train.num_steps = 2  # two steps barely move the encoder
  config.optimizer.warmup_steps = 1
  tuned_workdir = str(tmp_path / 'tuned')
  train.train_and_evaluate(config, tuned_workdir)
  loaded = workdir_lib.restore(source).params
  shutil.rmtree(source)  # the fine-tuned workdir needs nothing of it
  tuned = workdir_lib.restore(tuned_workdir).params
  moved = np.abs(np.asarray(tuned['embed']['embed']['embedding']) -
                 np.asarray(loaded['embed']['embed']['embedding'])).max()
  assert moved < 0.01  # started from, not re-initialised
  assert 'classifier' in tuned and 'classifier' not in loaded
  # The explorer reads a fine-tuned classifier's encoder too.
  restored = workdir_lib.restore(tuned_workdir)
  with restored.active():
    [view] = attention_views.of(restored.task, restored.params,
                                 'a good film')
  assert view.queries[0] == '[CLS]'
  np.testing.assert_allclose(view.weights.sum(-1), 1.0, atol=1e-5)


def test_fine_tuning_refuses_a_workdir_of_another_task(tmp_path):
  config = load_experiment('lm_offline', 'runlocal')
  other = str(tmp_path / 'language_model')
  train.train_and_evaluate(config, other)
  with raises_naming(ValueError, f'config.train.init_from={other}',
                     "'language_modeling'", 'masked_language_modeling'):
    load_experiment('sst2', f'init_from={other},runlocal')
  config = load_experiment('sst2', 'runlocal')
  config.train.init_from = other  # set directly, not by the experiment
  with raises_naming(ValueError, f'config.train.init_from={other}',
                     "'language_modeling'", 'masked_language_modeling'):
    train.train_and_evaluate(config, str(tmp_path / 'tuned'))


def test_fine_tuning_goes_on_from_a_classifier_keeping_its_head(tmp_path):
  """A classifier workdir (e.g. a converted BertForSequenceClassification)
  starts another fine-tuning with its head when the classes are as many."""
  config = load_experiment('sst2', 'runlocal')
  classifier = str(tmp_path / 'classifier')
  train.train_and_evaluate(config, classifier)
  head = workdir_lib.restore(classifier).params['classifier']['kernel']
  config = load_experiment('sst2', f'init_from={classifier},runlocal')
  config.optimizer.learning_rate = 1e-9
  train.train_and_evaluate(config, str(tmp_path / 'tuned'))
  tuned = workdir_lib.restore(str(tmp_path / 'tuned')).params
  np.testing.assert_allclose(tuned['classifier']['kernel'], head, atol=1e-6)
  assert np.abs(np.asarray(head)).max() > 0  # trained away from zero init
