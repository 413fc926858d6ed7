"""`Task.train_batch_shapes` (what a plan compiles for, from the config
alone) against the batches `train_iter` really yields, and tasks built
with `shapes_only`: no data read, nothing written, the same model."""

import jax
import numpy as np
import pytest

from conftest import load_experiment
from transformer import tasks
from transformer.data import batching

# (experiment, argument): every task and batching kind, on data generated
# in process.
EXPERIMENTS = [
    ('mt_offline', 'runlocal'),  # packed pairs
    ('rnn_vs_transformer', 'model=rnn_attention,runlocal'),  # buckets
    ('lm_offline', 'runlocal'),  # packed documents
    ('bert_mlm', 'runlocal'),  # buckets of chunks
    ('glue', 'task=entailment,runlocal'),  # buckets of pairs
    ('vit_offline', 'runlocal'),
    ('captioning_offline', 'runlocal'),
    ('vilbert_offline', 'runlocal'),
    ('vilbert_vqa', 'runlocal'),
    ('vilbert_refer', 'runlocal'),
]


# Those whose batches are length buckets of one example a row.
BUCKETED = ('rnn_vs_transformer', 'bert_mlm', 'glue')


def _shapes(batch):
  return {key: (tuple(np.shape(value)),
                jax.dtypes.canonicalize_dtype(value.dtype))
          for key, value in batch.items()}


@pytest.mark.parametrize('name,arg', EXPERIMENTS)
def test_train_batch_shapes_are_those_train_iter_yields(name, arg, tmp_path):
  config = load_experiment(name, arg)
  task = tasks.build(config, str(tmp_path / 'real'), batch_divisor=2)
  batches = task.train_iter(0)
  real = [_shapes(next(batches)) for _ in range(4)]
  planned = tasks.build(config, str(tmp_path / 'planned'), batch_divisor=2,
                        shapes_only=True)
  expected = _shapes(planned.train_batch_shapes())
  bucketed = name in BUCKETED
  for batch in real:
    assert batch.keys() == expected.keys()
    for key, (shape, dtype) in batch.items():
      assert dtype == expected[key][1], key
      if not bucketed:
        assert shape == expected[key][0], key
        continue
      # A length bucket of width W <= max_length has rows_of_width(W) rows:
      # the plan takes the widest.
      rows, width = shape
      assert expected[key][0] == (batching.rows_of_width(
          config.data.max_length, tokens_per_batch=config.data.tokens_per_batch,
          row_multiple=2), config.data.max_length)
      assert width <= config.data.max_length and rows == batching.rows_of_width(
          width, tokens_per_batch=config.data.tokens_per_batch, row_multiple=2)
  assert not (tmp_path / 'planned').exists()  # nothing read or written
  params = jax.eval_shape(task.init, jax.random.key(0))
  planned_params = jax.eval_shape(planned.init, jax.random.key(0))
  # The same model: SentencePiece has vocab_size pieces, and the scenes'
  # words need no data; words learned from captions are as many as the
  # text has (the plan assumes vocab_size: `vocabularies.stand_in`).
  if name != 'captioning_offline':
    assert jax.tree.map(lambda x: x.shape, params) == jax.tree.map(
        lambda x: x.shape, planned_params)
