"""Alignments of the RNN: its one additive attention (translate
--alignments on a trained workdir: e2e/test_translate_alignments_e2e.py)."""

import jax
import numpy as np

from conftest import load_experiment
from conftest import raises_naming
from transformer import layers
from transformer import tasks
from transformer.insight import attention_views


def test_the_rnn_alignment_is_its_additive_attention(tmp_path):
  config = load_experiment('mt_offline', 'runlocal')
  config.model.update({'family': 'rnn', 'size': 'tiny'})
  task = tasks.build(config, str(tmp_path))
  # Initialised and applied under jit, as the task runs its model: eagerly
  # every operation of the RNN compiles on its own (two seconds).
  params = jax.jit(task.init)(jax.random.key(0))
  pairs = [(np.asarray([5, 6, 7, 1], np.int32), np.asarray([8, 9, 1])),
           (np.asarray([5, 1], np.int32), np.asarray([9, 9, 9, 9, 1]))]
  weights = task.alignments(params, pairs)

  @jax.jit
  def hooked(params, source, target):
    _, state = task.model.apply({'params': params}, source, target,
                                deterministic=True, mutable=['intermediates'])
    return layers.attention_weights(state['intermediates'])['attention']

  for (source, target), matrix in zip(pairs, weights):
    expected = hooked(params, source[None], target[None])
    assert matrix.shape == (len(target), len(source))
    np.testing.assert_allclose(matrix, expected[0, 0], atol=1e-5)
  with raises_naming(ValueError, 'RNN', 'one alignment',
                     'leave the layer and head unset'):
    task.alignments(params, pairs, head=0)
  # The explorer shows the same alignment, for the model's own translation.
  [view] = attention_views.of(task, params, 'the red house')
  assert view.name.startswith('alignment') and view.weights.shape[:2] == (1, 1)
  assert view.weights.shape[2:] == (len(view.queries), len(view.keys))
  np.testing.assert_allclose(view.weights.sum(-1), 1.0, atol=1e-5)
