"""Attention before Transformers: additive attention (Bahdanau et al.
2015), used by the RNN encoder-decoder and Show, Attend and Tell, and
kernel regression without learning (Nadaraya 1964, Watson 1964), the
lectures' first example of attention."""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.attention.kernels import masked_softmax
from transformer.core import masks

Array = jax.Array
Dtype = Any


# ----------------------------------------------------------------------------
# Additive attention (Bahdanau et al. 2015)
# ----------------------------------------------------------------------------


class AdditiveAttention(nn.Module):
  """Bahdanau attention, the MLP similarity e_i = v^T tanh(W_q s + W_k h_i).

  Weights a = softmax(e) over the keys, context c = sum_i a_i h_i. Keys and
  values are usually the same encoder states h. In an RNN decoder the keys
  are projected once with `project_keys` and `attend` runs at every step.

  Attributes:
    features: A, the hidden size of the MLP.
  """
  features: int
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  kernel_init: Callable[..., Array] = nn.initializers.xavier_uniform()

  def setup(self):
    dense = functools.partial(
        nn.Dense, self.features, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=nn.with_logical_partitioning(self.kernel_init,
                                                 ('embed', 'mlp')))
    self.query_projection = dense(
        use_bias=True,
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                               ('mlp',)))
    self.key_projection = dense(use_bias=False)
    self.score = nn.Dense(
        1, use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=nn.with_logical_partitioning(self.kernel_init,
                                                 ('mlp', None)))

  def project_keys(self, keys: Array) -> Array:
    """W_k h_i. keys: [..., S, D_k] -> [..., S, A]."""
    return self.key_projection(keys)

  def attend(self, query: Array, projected_keys: Array, values: Array,
             mask: Array | None = None) -> tuple[Array, Array]:
    """Attention of each query over the keys.

    Args:
      query: [..., T, D_q], decoder states s (T = 1 for one RNN step).
      projected_keys: [..., S, A] from `project_keys`.
      values: [..., S, D_v], the vectors averaged (usually the keys h).
      mask: bool broadcastable to [..., T, S].

    Returns:
      context [..., T, D_v] and weights [..., T, S].
    """
    if projected_keys.shape[-2] != values.shape[-2]:
      raise ValueError(
          f'Keys and values must have the same length S, got keys '
          f'{projected_keys.shape} and values {values.shape}.')
    weights_shape = (*query.shape[:-1], projected_keys.shape[-2])
    masks.check(mask, weights_shape, '[..., T, S]')
    hidden = jnp.tanh(self.query_projection(query)[..., :, None, :] +
                      projected_keys[..., None, :, :])  # [..., T, S, A]
    scores = self.score(hidden)[..., 0].astype(jnp.float32)  # [..., T, S]
    weights = masked_softmax(scores, mask)
    self.sow('intermediates', 'attention_weights', weights)
    context = jnp.einsum('...ts,...sd->...td', weights.astype(values.dtype),
                         values)
    return context, weights

  def __call__(self, query: Array, keys: Array, values: Array | None = None,
               mask: Array | None = None) -> tuple[Array, Array]:
    """`attend(query, project_keys(keys), values or keys, mask)`."""
    values = keys if values is None else values
    return self.attend(query, self.project_keys(keys), values, mask)



# ----------------------------------------------------------------------------
# Kernel attention without learning (Nadaraya 1964, Watson 1964)
# ----------------------------------------------------------------------------


def nadaraya_watson(query: Array, key: Array, value: Array,
                    bandwidth: float | Array = 1.0,
                    mask: Array | None = None) -> tuple[Array, Array]:
  """Nadaraya-Watson kernel regression as attention pooling: with a
  Gaussian kernel K(u) = exp(-u^2 / 2),

    f(q) = sum_i K((q - k_i) / h) / sum_j K((q - k_j) / h) * v_i
         = sum_i softmax_i(-||q - k_i||^2 / (2 h^2)) v_i,

  attention whose scores are negative squared distances and which has no
  learned parameters (the bandwidth h sets how local it is: h -> 0 returns
  the nearest key's value, h -> inf the mean of all values).

  Args:
    query: [..., T, F] query points (F features; F = 1 for the lecture's
      1-D regression).
    key: [..., S, F] key points.
    value: [..., S, E] the values at the keys.
    bandwidth: h > 0, a scalar or anything broadcasting against [..., T, S].
    mask: True where a query may use a key, broadcasting to [..., T, S].

  Returns:
    (output [..., T, E], weights [..., T, S]); the weights of each row sum
    to 1 over its kept keys.
  """
  if query.ndim < 2 or key.ndim != query.ndim or value.ndim != key.ndim:
    raise ValueError(
        f'query, key and value must be [..., T, F], [..., S, F] and '
        f'[..., S, E] of one rank >= 2; got shapes {query.shape}, '
        f'{key.shape}, {value.shape}. Give 1-D points a feature axis of 1.')
  if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
    raise ValueError(
        f'Queries and keys need the same features and keys and values the '
        f'same length; got {query.shape}, {key.shape}, {value.shape}.')
  distances = jnp.sum(
      (query[..., :, None, :] - key[..., None, :, :]) ** 2, axis=-1)
  weights = masked_softmax(-distances / (2 * jnp.square(bandwidth)), mask)
  return jnp.einsum('...ts,...se->...te', weights, value), weights


class KernelRegression(nn.Module):
  """Nadaraya-Watson pooling with a learned bandwidth, the lecture's
  parametric version: one parameter, h = exp(log_bandwidth)."""
  init_bandwidth: float = 1.0

  @nn.compact
  def __call__(self, query: Array, key: Array, value: Array,
               mask: Array | None = None) -> tuple[Array, Array]:
    log_bandwidth = self.param(
        'log_bandwidth', lambda _: jnp.log(jnp.float32(self.init_bandwidth)))
    return nadaraya_watson(query, key, value, jnp.exp(log_bandwidth), mask)
