"""The label-smoothed cross-entropy against its definition: the expected
negative log-probability under the smoothed target distribution (1 - e on
the label, e / V on each of the V possible tokens), and its gradient,
softmax minus that distribution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.core import losses
from transformer.core import masks

V = 11


def definition(logits, targets, smoothing, possible):
  log_probs = jax.nn.log_softmax(logits)
  target = (1 - smoothing) * jax.nn.one_hot(targets, V) + (
      smoothing * possible / possible.sum())
  return -(target * jnp.where(possible, log_probs, 0.0)).sum(-1)


@pytest.mark.parametrize('smoothing', [0.0, 0.1, 0.3])
@pytest.mark.parametrize('masked', [False, True])
def test_smoothed_cross_entropy_matches_its_definition(smoothing, masked):
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(0, 3, (2, 5, V)), jnp.float32)
  targets = jnp.asarray(rng.integers(1, V, (2, 5)))
  possible = np.ones(V, bool)
  if masked:  # id 0 masked out, as a converted GPT-2's padding
    possible[0] = False
    logits = logits.at[..., 0].set(masks.MASKED_LOGIT)
  loss, nll = losses.smoothed_cross_entropy(logits, targets, smoothing)
  np.testing.assert_allclose(loss, definition(logits, targets, smoothing,
                                              possible), rtol=1e-5)
  np.testing.assert_allclose(nll, definition(logits, targets, 0.0, possible),
                             rtol=1e-5)
  grad = jax.grad(lambda x: losses.smoothed_cross_entropy(
      x, targets, smoothing)[0].sum())(logits)
  expected = jax.nn.softmax(logits) - (
      (1 - smoothing) * jax.nn.one_hot(targets, V)
      + smoothing * possible / possible.sum())
  np.testing.assert_allclose(grad, expected, atol=1e-6)


def test_large_logits_stay_finite():
  logits = jnp.asarray([[1e4, -1e4, 0.0]], jnp.float32)
  loss, nll = losses.smoothed_cross_entropy(logits, jnp.asarray([1]), 0.1)
  assert np.isfinite(loss).all() and float(nll[0]) == pytest.approx(2e4)


def test_accuracy_is_argmax_but_ties_count_wrong():
  rng = np.random.default_rng(1)
  logits = jnp.asarray(rng.normal(0, 1, (3, 7, V)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, V, (3, 7)))
  targets = targets.at[0, :4].set(jnp.argmax(logits[0, :4], -1))  # some hits
  correct, count = losses.token_sums(logits, targets, 0.0)['accuracy']
  expected = (jnp.argmax(logits, -1) == targets) & (targets > 0)
  assert 4 <= float(correct) == float(expected.sum())
  assert float(count) == float((targets > 0).sum())
  # Ties: argmax picks the lowest tied id (3 in the second row, the label);
  # a tie is no prediction, so neither row is correct.
  flat = jnp.zeros((2, V)).at[1, 3].set(1.0).at[1, 5].set(1.0)
  correct, _ = losses.token_sums(flat, jnp.asarray([1, 3]), 0.0)['accuracy']
  assert float(correct) == 0.0
