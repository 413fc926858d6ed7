"""Text classification fine-tunes from a converted BERT workdir. Skipped
without `transformers` and `torch` (`pip install -e ".[interop]"`)."""

import numpy as np
import pytest

from conftest import load_experiment
from conftest import publish_bert
from conftest import published_and_converted
from transformer import train
from transformer import workdir as workdir_lib

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')


published, converted = published_and_converted(publish_bert)


def test_text_classification_fine_tunes_the_converted_encoder(converted,
                                                              tmp_path):
  _, loaded, workdir = converted
  config = load_experiment('sst2', f'init_from={workdir},runlocal')
  config.train.num_steps = 2
  config.optimizer.warmup_steps = 1
  train.train_and_evaluate(config, str(tmp_path))
  restored = workdir_lib.restore(str(tmp_path))
  tuned = restored.params
  assert type(restored.task.tokenizer).__name__ == 'BertTokenizer'
  moved = np.abs(np.asarray(tuned['embed']['embed']['embedding']) -
                 np.asarray(loaded['embed']['embed']['embedding'])).max()
  assert moved < 0.01  # started from the converted weights
  np.testing.assert_array_equal(tuned['pooler']['kernel'].shape,
                                loaded['pooler']['kernel'].shape)
