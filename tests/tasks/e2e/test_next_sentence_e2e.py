"""Pretraining with BERT's next-sentence prediction: both objectives
reported, the loss their sum."""

import numpy as np
import pytest

from conftest import load_experiment
from transformer import train
from transformer import workdir as workdir_lib


@pytest.mark.slow  # 10 s; CI runs it
@pytest.mark.ci
def test_pretraining_with_next_sentence_reports_both_objectives(tmp_path):
  config = load_experiment('bert_mlm', 'nsp,runlocal')
  assert config.data.next_sentence
  result = train.train_and_evaluate(config, str(tmp_path))
  assert {'mlm_accuracy', 'nsp_accuracy', 'nsp_loss', 'nll'} <= set(result)
  assert 0 <= result['nsp_accuracy'] <= 1
  # A batch's loss is the sum of its two means.
  restored = workdir_lib.restore(str(tmp_path))
  batch = next(restored.task.train_iter(0))
  with restored.active():
    loss, sums = restored.task.loss(restored.params, batch, None,
                                    deterministic=True)
  mean = lambda name: sums[name][0] / sums[name][1]
  np.testing.assert_allclose(loss, mean('nll') + mean('nsp_loss'),
                             rtol=1e-5)
  assert 'next_sentence' in restored.params
