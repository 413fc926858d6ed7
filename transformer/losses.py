"""Losses of the tasks: label-smoothed cross-entropy, summed over tokens.

Losses return metric sums, (sum, count) pairs that add up across steps and
devices (`metrics.normalize` divides them once on the host); the training
loss of a batch is `mean(sums)`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from transformer import layers
from transformer import metrics


def smoothed_cross_entropy(logits: jax.Array, targets: jax.Array,
                           smoothing: float) -> tuple[jax.Array, jax.Array]:
  """Per-token label-smoothed loss and plain negative log-likelihood.

  The smoothed target puts 1 - smoothing on the label and smoothing / V on
  every token; written without a one-hot so [B, T, V] is never built twice.
  Ids a model masks out (`layers.MASKED_LOGIT`, e.g. a converted GPT-2's
  padding) are not among the V.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  if not smoothing:  # the same value, without another pass over [B, T, V]
    return nll, nll
  possible = logits > layers.MASKED_LOGIT / 2
  uniform = -jnp.where(possible, log_probs, 0.0).sum(-1) / possible.sum(-1)
  return (1.0 - smoothing) * nll + smoothing * uniform, nll


def token_sums(logits: jax.Array, targets: jax.Array,
               label_smoothing: float) -> dict[str, tuple[Any, Any]]:
  """'loss' (label-smoothed), 'nll' and 'accuracy' summed over the real
  target tokens (ids > 0, padding being 0) of logits [..., V] and targets
  [...], each with the token count."""
  weights = (targets > 0).astype(jnp.float32)
  loss, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  count = weights.sum()
  correct = (logits.argmax(-1) == targets) * weights
  return {'loss': ((loss * weights).sum(), count),
          'nll': ((nll * weights).sum(), count),
          'accuracy': (correct.sum(), count)}


def mean(sums: metrics.Sums, name: str = 'loss') -> jax.Array:
  """sum / count of one metric, for a batch with no counted item 0."""
  total, count = sums[name]
  return total / jnp.maximum(count, 1.0)
