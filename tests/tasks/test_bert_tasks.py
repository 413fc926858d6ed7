"""BERT's classification data: offline sentiment, TSV files and GLUE SST-2
under mock data. MLM pretraining, then fine-tuned classification:
e2e/test_bert_tasks_e2e.py."""

import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer.data import sources
from transformer.data.generated import offline_sentiment


def test_offline_sentiment_and_tsv(tmp_path):
  examples = offline_sentiment.examples(200, 0, 'train')
  labels = [label for _, label in examples]
  assert 0.3 < np.mean(labels) < 0.7
  for sentence, label in examples[:50]:
    words = sentence.split()
    score = (sum(w in offline_sentiment.PLEASANT for w in words) -
             sum(w in offline_sentiment.UNPLEASANT for w in words))
    assert score != 0 and label == int(score > 0)
  (tmp_path / 'train.tsv').write_text('a fine film\t1\nawful\t0\n')
  config = load_experiment('sst2', f'source=tsv,path={tmp_path},runlocal')
  assert sources.read('labelled_text', config.data, 'train') == [
      ('a fine film', None, 1), ('awful', None, 0)]
  (tmp_path / 'validation.tsv').write_text('no label here\n')
  with raises_naming(ValueError, 'validation.tsv', 'line 1',
                     'text<TAB>label'):
    sources.read('labelled_text', config.data, 'validation')


def test_glue_sst2_loads_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('sst2', 'source=tfds,runlocal')
  with tfds.testing.mock_data(num_examples=5):
    pairs = sources.read('labelled_text', config.data, 'train')
  assert len(pairs) == 5
  assert all(isinstance(t, str) and b is None and label in (0, 1)
             for t, b, label in pairs)
