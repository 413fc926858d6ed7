"""BERT end to end: MLM pretraining, then fine-tuned classification."""

import jax
import numpy as np
import pytest

from conftest import load_experiment
from transformer import train
from transformer.tasks import text_classification


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


def test_fine_tuning_starts_from_the_pretrained_encoder(pretrained, tmp_path):
  _, mlm_workdir, _ = pretrained
  config = load_experiment('sst2', f'init_from={mlm_workdir},runlocal')
  config.train.num_steps = 2  # two steps barely move the encoder
  config.optimizer.warmup_steps = 1
  train.train_and_evaluate(config, str(tmp_path))
  tuned, _ = train.Trainer(config, str(tmp_path)).restore_params()
  source = train.Trainer(train.load_config(mlm_workdir), mlm_workdir)
  loaded, _ = source.restore_params()
  moved = np.abs(np.asarray(tuned['embed']['embed']['embedding']) -
                 np.asarray(loaded['embed']['embed']['embedding'])).max()
  assert moved < 0.01  # started from, not re-initialised
  assert 'classifier' in tuned and 'classifier' not in loaded


def test_offline_sentiment_and_tsv(tmp_path):
  examples = text_classification.offline_sentiment(200, 0, 'train')
  labels = [label for _, label in examples]
  assert 0.3 < np.mean(labels) < 0.7
  for sentence, label in examples[:50]:
    words = sentence.split()
    score = (sum(w in text_classification.PLEASANT for w in words) -
             sum(w in text_classification.UNPLEASANT for w in words))
    assert score != 0 and label == int(score > 0)
  (tmp_path / 'train.tsv').write_text('a fine film\t1\nawful\t0\n')
  config = load_experiment('sst2', f'source=tsv,path={tmp_path},runlocal')
  assert text_classification.read_split(config.data, 'train') == [
      ('a fine film', 1), ('awful', 0)]
  (tmp_path / 'validation.tsv').write_text('no label here\n')
  with pytest.raises(ValueError, match='line 1'):
    text_classification.read_split(config.data, 'validation')


def test_glue_sst2_loads_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('sst2', 'source=tfds,runlocal')
  with tfds.testing.mock_data(num_examples=5):
    pairs = text_classification.read_split(config.data, 'train')
  assert len(pairs) == 5
  assert all(isinstance(t, str) and label in (0, 1) for t, label in pairs)
