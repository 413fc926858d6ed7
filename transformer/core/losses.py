"""Losses of the tasks: label-smoothed cross-entropy, summed over tokens.

Losses return metric sums, (sum, count) pairs that add up across steps and
devices (`metrics.normalize` divides them once on the host); the training
loss of a batch is `mean(sums)`.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from transformer.core import masks

# Metric sums: name -> (sum, count), added across steps and devices.
Sums = Mapping[str, tuple[Any, Any]]


def smoothed_cross_entropy(logits: jax.Array, targets: jax.Array,
                           smoothing: float) -> tuple[jax.Array, jax.Array]:
  """Per-token label-smoothed loss and plain negative log-likelihood.

  The smoothed target puts 1 - smoothing on the label and smoothing / V on
  every token. Written as logsumexp minus the label's logit, picked by a
  comparison with the vocabulary's ids rather than `take_along_axis`: the
  gradient is then softmax minus a one-hot, one fused pass over [B, T, V],
  where `take_along_axis`'s is a scatter into a zero [B, T, V] array (the
  LM train step spent a third of its time there on CPU). Ids a model masks
  out (`masks.MASKED_LOGIT`, e.g. a converted GPT-2's padding) are not
  among the V.
  """
  logits = logits.astype(jnp.float32)
  normalizer = jax.nn.logsumexp(logits, axis=-1)
  _, label_logit = _pick_labels(logits, targets)
  nll = normalizer - label_logit
  if not smoothing:  # the same value, without another pass over [B, T, V]
    return nll, nll
  possible = logits > masks.MASKED_LOGIT / 2
  mean_logit = (jnp.where(possible, logits, 0.0).sum(-1)
                / possible.sum(-1))
  return (1.0 - smoothing) * nll + smoothing * (normalizer - mean_logit), nll


def _label_wins(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """[...] bool: the label's logit is above every other id's.

  argmax's answer but for exact ties, which count as wrong (so constant
  logits score 0, not the share of the lowest id). Two plain passes over
  [..., V], the first shared with the loss's label pick, instead of argmax's
  two-output reduction: the slowest op of a CPU train step after the matmuls
  (184 ms of a 2-layer GPT step's 4.1 s at vocab 50,304; this is 95 ms).
  """
  logits = logits.astype(jnp.float32)
  is_label, label_logit = _pick_labels(logits, targets)
  return label_logit > jnp.where(is_label, -jnp.inf, logits).max(-1)


def _pick_labels(logits: jax.Array, targets: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """([..., V] bool, True at each target's id; [...] the target's logit),
  by a comparison with the vocabulary's ids (see `smoothed_cross_entropy`).
  """
  ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  is_label = ids == targets[..., None]
  return is_label, jnp.where(is_label, logits, 0.0).sum(-1)


def token_sums(logits: jax.Array, targets: jax.Array,
               label_smoothing: float) -> dict[str, tuple[Any, Any]]:
  """'loss' (label-smoothed), 'nll' and 'accuracy' summed over the real
  target tokens (ids > 0, padding being 0) of logits [..., V] and targets
  [...], each with the token count. A token is accurate when its label's
  logit is above every other (`_label_wins`: a tie counts as wrong)."""
  weights = (targets > 0).astype(jnp.float32)
  loss, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  count = weights.sum()
  correct = _label_wins(logits, targets) * weights
  return {'loss': ((loss * weights).sum(), count),
          'nll': ((nll * weights).sum(), count),
          'accuracy': (correct.sum(), count)}


def mean(sums: Sums, name: str = 'loss') -> jax.Array:
  """sum / count of one metric, for a batch with no counted item 0."""
  total, count = sums[name]
  return total / jnp.maximum(count, 1.0)
