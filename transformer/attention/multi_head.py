"""Attention: additive (Bahdanau), kernel (Nadaraya-Watson), dot-product,
multi-head, with a KV cache.

Conventions
-----------
Letters used in shapes and einsum strings across the codebase:

  B  batch (`...` where any number of leading batch dimensions is allowed)
  T  query length ("target")        S  key/value length ("source")
  N  query heads                     K  key/value heads, N % K == 0
  G  query heads per key/value head, G = N // K
  H  head dim                        D  model dim
  A  hidden size of the additive-attention MLP
  V  vocabulary size

Layouts are those of flax and `jax.nn.dot_product_attention`, so the fused
kernels take them without transposes: queries [..., T, N, H], keys and values
[..., S, K, H], attention weights [..., N, T, S]. Masks (`transformer.masks`)
are boolean, True where a query may attend to a key, and must broadcast
against [..., N, T, S]: a [T, S] mask applies to every batch element and
head, a padding mask from `masks.padding_mask` is [B, 1, 1, S].

A query row whose keys are all masked attends to nothing: its weights are all
zero and its output is zero (never NaN, never a uniform average).

Kernels (`implementation=`):
  'einsum'  the plain reference below; the only one that returns weights and
            applies attention dropout, so both of those always use it.
            Causal self-attention runs there in two query halves, the
            first half's keys ending where its queries do: the quarter of
            the scores causality masks for every one of them is never
            computed.
  'xla'     `jax.nn.dot_product_attention(implementation='xla')` on GPUs and
            TPUs; on a CPU the einsum path, which is faster there.
  'cudnn'   `jax.nn.dot_product_attention(implementation='cudnn')`: cuDNN
            flash attention; raises where cuDNN cannot run the inputs.
  'auto'    cuDNN on a GPU when its constraints hold (bf16/fp16, head dim a
            multiple of 8 and at most 128), XLA everywhere else, and XLA again
            when cuDNN rejects the inputs at trace time.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from absl import logging
from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import beam_slots
from transformer import masks
from transformer import positional

Array = jax.Array
Dtype = Any

IMPLEMENTATIONS = ('einsum', 'xla', 'cudnn', 'auto')


def _masked_softmax(logits: Array, mask: Array | None) -> Array:
  """Softmax over the last axis; masked entries and fully masked rows are 0."""
  if mask is None:
    return jax.nn.softmax(logits, axis=-1)
  # The finite minimum (not -inf) keeps fully masked rows free of NaN in both
  # the forward and the backward pass; the final `where` zeroes them exactly.
  logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  return jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)


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
    weights = _masked_softmax(scores, mask)
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
  weights = _masked_softmax(-distances / (2 * jnp.square(bandwidth)), mask)
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


# ----------------------------------------------------------------------------
# Dot-product attention
# ----------------------------------------------------------------------------


def _check_qkv(query: Array, key: Array, value: Array) -> None:
  if not query.ndim == key.ndim == value.ndim >= 3:
    raise ValueError(
        f'query, key and value must be [..., T, N, H], [..., S, K, H] and '
        f'[..., S, K, H] with the same rank >= 3; got shapes {query.shape}, '
        f'{key.shape}, {value.shape}. Add a head axis of size 1 for '
        f'single-head attention.')
  if key.shape[-3] != value.shape[-3]:
    raise ValueError(
        f'Key and value lengths differ: key {key.shape} has S={key.shape[-3]} '
        f'but value {value.shape} has S={value.shape[-3]}. Keys and values '
        f'must come from the same sequence.')
  if key.shape[:-1] != value.shape[:-1]:
    raise ValueError(
        f'key {key.shape} and value {value.shape} must agree on batch, '
        f'length and heads.')
  if query.shape[:-3] != key.shape[:-3]:
    raise ValueError(
        f'query {query.shape} and key {key.shape} have different batch '
        f'dimensions.')
  if query.shape[-1] != key.shape[-1]:
    raise ValueError(
        f'query and key head dims differ: {query.shape[-1]} vs '
        f'{key.shape[-1]}; the dot product needs the same H.')
  if query.shape[-2] % key.shape[-2]:
    raise ValueError(
        f'The number of query heads N={query.shape[-2]} must be a multiple '
        f'of the number of key/value heads K={key.shape[-2]}.')


def _einsum_attention(query, key, value, mask, scale, dropout_rate,
                      dropout_rng):
  """The reference: E = Q K^T * scale, A = softmax(E), Y = A V."""
  *batch, t, n, h = query.shape
  s, k = key.shape[-3], key.shape[-2]
  if k == n:  # no groups: with a size-1 group axis XLA's CPU backend
    # transposed queries and gradients (GPT-2 small step: 0.36 s of
    # transposes and reshapes, 0.16 s without it; docs/benchmarks.md)
    logits = jnp.einsum('...tnh,...snh->...nts', query, key,
                        preferred_element_type=jnp.float32) * scale
  else:
    # Grouped-query attention without repeating keys: query heads are split
    # into K groups of G that share one key/value head.
    grouped = query.reshape(*batch, t, k, n // k, h)
    logits = jnp.einsum('...tkgh,...skh->...kgts', grouped, key,
                        preferred_element_type=jnp.float32)
    logits = logits.reshape(*batch, n, t, s) * scale
  if mask is None:
    probs = jax.nn.softmax(logits, axis=-1)
  else:
    # The finite minimum (not -inf) keeps fully masked rows free of NaN in
    # both passes; their output is zeroed below, on [..., T, N, H] rather
    # than on every weight.
    probs = jax.nn.softmax(
        jnp.where(mask, logits, jnp.finfo(logits.dtype).min), axis=-1)
  # Exactly 0 where masked (fully masked rows too); computed only when the
  # caller keeps the weights.
  weights = probs if mask is None else jnp.where(mask, probs, 0.0)
  if dropout_rng is not None and dropout_rate > 0.0:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  if k == n:
    out = jnp.einsum('...nts,...snh->...tnh', probs.astype(value.dtype),
                     value)
  else:
    probs = probs.astype(value.dtype).reshape(*batch, k, n // k, t, s)
    out = jnp.einsum('...kgts,...skh->...tkgh', probs, value)
    out = out.reshape(*batch, t, n, value.shape[-1])
  return _zero_fully_masked_rows(out, mask, (*batch, n, t, s)), weights


def _causal_halves(query, key, value, mask, scale, dropout_rate,
                   dropout_rng):
  """Causal self-attention in two query halves: the first half's keys end
  where its queries do, so the quarter of the scores that causality masks
  for all of them ([T/2, T/2], every first-half query against every
  second-half key) is never computed, nor its softmax and gradients. On a
  CPU, forward and backward, 1.2x to 1.4x faster than the whole for T from
  256 to 1,024 (docs/benchmarks.md). `mask` is the combined [..., T, S]
  mask."""
  half = query.shape[-3] // 2
  rngs = ((None, None) if dropout_rng is None
          else tuple(jax.random.split(dropout_rng)))
  first, _ = _einsum_attention(
      query[..., :half, :, :], key[..., :half, :, :], value[..., :half, :, :],
      mask[..., :half, :half], scale, dropout_rate, rngs[0])
  second, _ = _einsum_attention(query[..., half:, :, :], key, value,
                                mask[..., half:, :], scale, dropout_rate,
                                rngs[1])
  return jnp.concatenate([first, second], axis=-3)


def _zero_fully_masked_rows(out: Array, mask: Array | None,
                            weights_shape: tuple[int, ...]) -> Array:
  """Zeroes the output [..., T, N, H] of queries that may see no key."""
  if mask is None:
    return out
  attends = jnp.broadcast_to(jnp.any(mask, axis=-1), weights_shape[:-1])
  return jnp.where(jnp.swapaxes(attends, -1, -2)[..., None], out, 0)


def _cudnn_may_run(query: Array, key: Array, value: Array) -> bool:
  """The documented cuDNN flash-attention constraints, checked up front."""
  head_dim = query.shape[-1]
  return (jax.default_backend() == 'gpu'
          and query.dtype in (jnp.bfloat16, jnp.float16)
          and key.dtype == value.dtype == query.dtype
          and value.shape[-1] == head_dim
          and head_dim % 8 == 0 and head_dim <= 128)


def _fused_attention(query, key, value, mask, key_lengths, causal, scale,
                     implementation):
  """`jax.nn.dot_product_attention` on [..., T, N, H] inputs.

  Padding reaches the kernel as key lengths and causality as `is_causal`,
  so cuDNN skips masked blocks rather than adding a [B, N, T, S] bias; a
  mask of any other kind (segments, arbitrary) travels as a mask, broadcast
  to full [T, S] (cuDNN takes no other shape), with the key lengths folded
  into it so that the kernel sees one kind of padding.
  """
  batch, t, s = query.shape[:-3], query.shape[-3], key.shape[-3]
  if causal and t != s:  # is_causal aligns differently: keep our mask's
    mask, causal = masks.combine_masks(mask, masks.causal_mask(t, s)), False
  if mask is not None and key_lengths is not None:
    mask = masks.combine_masks(mask, masks.padding_mask(key_lengths, s))
    key_lengths = None
  flat = lambda x: x.reshape(-1, *x.shape[len(batch):])
  if mask is not None:
    mask = jnp.broadcast_to(mask, (*mask.shape[:-2], t, s))
    if mask.ndim > 3 and len(batch) != 1:
      # The kernel takes one batch axis: flatten the mask's batch axes too.
      mask = flat(jnp.broadcast_to(mask, (*batch, *mask.shape[-3:])))
  if key_lengths is not None:
    key_lengths = jnp.broadcast_to(key_lengths, batch).reshape(-1).astype(
        jnp.int32)
  key, value = key.astype(query.dtype), value.astype(query.dtype)
  call = functools.partial(jax.nn.dot_product_attention, flat(query),
                           flat(key), flat(value), mask=mask, scale=scale,
                           is_causal=causal,
                           key_value_seq_lengths=key_lengths)
  if implementation == 'cudnn' and jax.default_backend() != 'gpu':
    raise ValueError(
        f"implementation='cudnn' needs a GPU, but JAX runs on "
        f"{jax.default_backend()!r}; use 'auto' to take cuDNN where it can "
        f"run and XLA elsewhere.")
  if implementation == 'auto':
    implementation = 'xla'
    if _cudnn_may_run(query, key, value):
      try:
        return call(implementation='cudnn').reshape(query.shape)
      except (ValueError, NotImplementedError, RuntimeError) as e:
        logging.log_first_n(logging.WARNING,
                            'cuDNN attention rejected shapes q=%s k=%s (%s); '
                            'using XLA.', 1, query.shape, key.shape, e)
  return call(implementation=implementation).reshape(query.shape)


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    *,
    mask: Array | None = None,
    key_lengths: Array | None = None,
    causal: bool = False,
    scale: float | None = None,
    implementation: str = 'xla',
    dropout_rate: float = 0.0,
    dropout_rng: Array | None = None,
    return_weights: bool = False,
) -> Array | tuple[Array, Array]:
  """Scaled dot-product attention Y = softmax(Q K^T * scale) V per head.

  Args:
    query: [..., T, N, H].
    key: [..., S, K, H], K divides N (K < N is grouped-query attention).
    value: [..., S, K, H_v].
    mask: bool broadcastable to [..., N, T, S], True = may attend.
    key_lengths: [...] int, keys at positions >= length are padding.
    causal: mask keys after each query (s > t).
    scale: multiplies the logits; None gives 1/sqrt(H) (scaled dot product),
      1.0 gives plain dot-product attention.
    implementation: kernel, one of IMPLEMENTATIONS (module docstring).
    dropout_rate: attention dropout, applied when `dropout_rng` is given.
    dropout_rng: PRNG key for attention dropout, None for none (causal
      self-attention in halves draws each half's from a split of it).
    return_weights: also return the attention weights.

  Returns:
    [..., T, N, H_v] outputs, and [..., N, T, S] float32 weights (before
    dropout) if `return_weights`.
  """
  _check_qkv(query, key, value)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f'Unknown attention implementation {implementation!r}; '
                     f'choose one of {IMPLEMENTATIONS}.')
  *batch, t, n, h = query.shape
  s = key.shape[-3]
  weights_shape = (*batch, n, t, s)
  masks.check(mask, weights_shape, '[..., N, T, S]')
  combined = mask  # what every query may see, for the paths below that
  if key_lengths is not None:  # take one mask
    combined = masks.combine_masks(combined,
                                   masks.padding_mask(key_lengths, s))
  if causal:
    combined = masks.combine_masks(combined, masks.causal_mask(t, s))
  scale = 1.0 / math.sqrt(h) if scale is None else scale
  dropout = dropout_rng is not None and dropout_rate > 0.0
  # On a CPU jax's XLA kernel costs more than the einsum path (its grouped
  # layout adds a transpose and a select per layer and pass): 'xla' and
  # 'auto' take the einsum path there (docs/benchmarks.md).
  on_cpu = implementation != 'cudnn' and jax.default_backend() == 'cpu'
  if (implementation == 'einsum' or return_weights or dropout or on_cpu
      or value.shape[-1] != h):
    if causal and t == s and t % 2 == 0 and not return_weights:
      return _causal_halves(query, key, value, combined, scale, dropout_rate,
                            dropout_rng if dropout else None)
    out, weights = _einsum_attention(query, key, value, combined, scale,
                                     dropout_rate, dropout_rng)
    return (out, weights) if return_weights else out
  # The kernels average all values for a fully masked row; zero it instead.
  return _zero_fully_masked_rows(
      _fused_attention(query, key, value, mask, key_lengths, causal, scale,
                       implementation), combined, weights_shape)


# ----------------------------------------------------------------------------
# Multi-head attention
# ----------------------------------------------------------------------------


class HeadProjection(nn.Module):
  """Linear map of the last `num_in_axes` axes onto `out_shape`.

  x [..., *in] -> [..., *out] with a kernel [*in, *out] created at its full
  shape (not flattened, unlike `nn.DenseGeneral`), so its logical axis names
  apply while a mesh is active. Xavier-uniform over all in and out axes.

  Attributes:
    out_shape: e.g. (N, H) for a query projection, (D,) for the output.
    axis_names: logical names of the kernel's in and out axes.
    num_in_axes: how many trailing input axes are contracted.
  """
  out_shape: tuple[int, ...]
  axis_names: tuple[str | None, ...]
  num_in_axes: int = 1
  use_bias: bool = True
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    n_in, n_out = self.num_in_axes, len(self.out_shape)
    init = nn.initializers.xavier_uniform(
        in_axis=tuple(range(n_in)), out_axis=tuple(range(n_in, n_in + n_out)))
    kernel = self.param(
        'kernel', nn.with_logical_partitioning(init, self.axis_names),
        (*x.shape[-n_in:], *self.out_shape), self.param_dtype)
    y = jnp.tensordot(x.astype(self.dtype), kernel.astype(self.dtype),
                      axes=n_in)
    if self.use_bias:
      bias = self.param(
          'bias', nn.with_logical_partitioning(nn.initializers.zeros,
                                               self.axis_names[n_in:]),
          self.out_shape, self.param_dtype)
      y = y + bias.astype(self.dtype)
    return y


class MultiHeadAttention(nn.Module):
  """Multi-head self- or cross-attention with optional grouped KV heads.

  Q = x W_Q, K = z W_K, V = z W_V per head (z = x for self-attention, the
  encoder states for cross-attention), scaled dot-product attention per head,
  heads concatenated and projected by W_O.

  With `decode=True` the module keeps a KV cache in the 'cache' collection:
  - Self-attention: the first call with 'cache' mutable and empty creates a
    zero cache whose capacity is that call's length (call it with a dummy
    sequence of the maximum decode length) and computes the ordinary forward
    pass. Each later call appends its T new keys/values at the cache index,
    attends over everything written so far (causally within the new block if
    `causal`) and advances the index; a mask, if given, is [..., T, S_cache].
  - Cross-attention: the first call stores the projected keys and values of
    its `inputs_kv`, which must therefore be the real encoder outputs; later
    calls reuse them and ignore `inputs_kv`. Later queries may have G times
    the cache's rows (G beams per example, rows b * G + g; the cache then
    being `decoding.PerExample`): each group of G reads its example's keys,
    and a mask must not depend on the query (e.g. source padding [B, 1, 1,
    S]).
  - Beam search: a self-attention cache given a beam-slot map by
    `track_beams` keeps every row's keys and values where they were written
    and attends through the map (`transformer.beam_slots`), so that
    reordering the beams never copies the cache.

  With `rotary=True` self-attention rotates queries and keys by their
  positions (`rotary_embedding`, at the frequencies of `rope`) before the
  keys enter the cache; positions default to 0..T-1, continued from the
  cache index in decode mode.

  Attention weights are sown into 'intermediates' as 'attention_weights'
  ([..., N, T, S]) whenever that collection is mutable (for plots); this
  routes the computation through the einsum kernel.

  Attributes:
    num_heads: N, query heads.
    num_kv_heads: K, key/value heads; None = N, 1 = multi-query attention.
    head_dim: H; None = D / N.
    value_head_dim: H_v of the values; None = H (Table 3 row B of Vaswani
      et al. shrinks d_k alone).
    out_features: output width; None = D of `inputs_q`.
    use_bias: biases in the four projections.
    dropout_rate: attention dropout on the weights.
    implementation: the kernel, see the module docstring.
    decode: keep a KV cache for incremental decoding.
    rotary: rotary positions in self-attention.
    rope: their base and scaling (`positional.Rope`).
  """
  num_heads: int
  num_kv_heads: int | None = None
  head_dim: int | None = None
  value_head_dim: int | None = None
  out_features: int | None = None
  use_bias: bool = True
  dropout_rate: float = 0.0
  implementation: str = 'xla'
  decode: bool = False
  rotary: bool = False
  rope: positional.Rope = positional.Rope()
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  def _head_sizes(self, features: int) -> tuple[int, int]:
    """Validated (K, H) for inputs of width D = features."""
    num_kv_heads = self.num_kv_heads or self.num_heads
    if self.num_heads <= 0 or num_kv_heads <= 0:
      raise ValueError(f'num_heads={self.num_heads} and num_kv_heads='
                       f'{self.num_kv_heads} must be positive.')
    if self.num_heads % num_kv_heads:
      raise ValueError(
          f'num_heads={self.num_heads} is not a multiple of num_kv_heads='
          f'{num_kv_heads}: each key/value head serves a whole group of '
          f'query heads. Pick num_kv_heads among the divisors of num_heads.')
    if self.head_dim is None and features % self.num_heads:
      raise ValueError(
          f'Model dim D={features} is not divisible by num_heads='
          f'{self.num_heads}; choose a num_heads that divides D or set '
          f'head_dim explicitly.')
    if self.implementation not in IMPLEMENTATIONS:
      raise ValueError(f'Unknown attention implementation '
                       f'{self.implementation!r}; choose one of '
                       f'{IMPLEMENTATIONS}.')
    return num_kv_heads, self.head_dim or features // self.num_heads

  def _projection(self, heads: int, head_dim: int, name: str) -> nn.Module:
    return HeadProjection((heads, head_dim), ('embed', 'heads', 'kv'),
                          use_bias=self.use_bias, dtype=self.dtype,
                          param_dtype=self.param_dtype, name=name)

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array | None = None, *,
               mask: Array | None = None, causal: bool = False,
               positions: Array | None = None, deterministic: bool,
               return_weights: bool = False) -> Array | tuple[Array, Array]:
    """Attends from `inputs_q` to `inputs_kv` (to itself if None).

    Args:
      inputs_q: [..., T, D].
      inputs_kv: [..., S, D_kv] for cross-attention, None for self-attention.
      mask: bool broadcastable to [..., N, T, S], or `masks.KeyLengths`.
      causal: no look-ahead (decoder self-attention).
      positions: [..., T] positions of the queries (and of the keys in
        self-attention), used by rotary positions only.
      deterministic: disables attention dropout.
      return_weights: also return the [..., N, T, S] weights.

    Returns:
      [..., T, out_features], and the weights if `return_weights`.
    """
    features = inputs_q.shape[-1]
    num_kv_heads, head_dim = self._head_sizes(features)
    self_attention = inputs_kv is None
    kv_source = inputs_q if self_attention else inputs_kv
    key_lengths = None
    if isinstance(mask, masks.KeyLengths) and not self.decode:
      key_lengths, mask = mask.lengths, None
    query = self._projection(self.num_heads, head_dim, 'query')(inputs_q)
    project_kv = lambda: (
        self._projection(num_kv_heads, head_dim, 'key')(kv_source),
        self._projection(num_kv_heads, self.value_head_dim or head_dim,
                         'value')(kv_source))

    if self.rotary and not self_attention:
      raise ValueError('Rotary positions apply to self-attention only; '
                       'build cross-attention with rotary=False.')
    groups = 1
    if self.decode and not self_attention:
      key, value = self._cross_cache(project_kv)
      if isinstance(mask, masks.KeyLengths):  # a mask over the cached keys
        mask = mask.mask(key.shape[-3])
      groups = _shared_key_groups(query, key, mask)
      query = _fold_rows(query, groups)
    else:
      key, value = project_kv()
      if self.rotary:
        positions = self._rotary_positions(positions, query.shape[-3])
        frequencies = positional.rotary_frequencies(self.rope, head_dim,
                                                    positions)
        query = positional.rotary_embedding(query, positions, frequencies)
        key = positional.rotary_embedding(key, positions, frequencies)
      if self.decode:
        if isinstance(mask, masks.KeyLengths):
          raise ValueError(
              'masks.KeyLengths counts the keys of a whole sequence; a KV '
              'cache holds positions as they come: give decoding '
              'self-attention a mask in cache coordinates, or none.')
        key, value, mask = self._update_self_cache(key, value, mask, causal)
        causal = False  # now part of the mask, in cache coordinates

    dropout_rng = None
    if not deterministic and self.dropout_rate > 0.0:
      dropout_rng = self.make_rng('dropout')
    capture = self.is_mutable_collection('intermediates')
    if self.decode and self.has_variable('cache', 'beam_slots'):
      if dropout_rng is not None:
        raise ValueError('A KV cache that tracks beams is for decoding: '
                         'call it with deterministic=True.')
      out, weights = beam_slots.attention(
          query, key, value, self.get_variable('cache', 'beam_slots'), mask,
          scale=1.0 / math.sqrt(head_dim))
    else:
      result = dot_product_attention(
          query, key, value, mask=mask, key_lengths=key_lengths,
          causal=causal,
          implementation=self.implementation,
          dropout_rate=self.dropout_rate, dropout_rng=dropout_rng,
          return_weights=return_weights or capture)
      out, weights = result if (return_weights or capture) else (result,
                                                                  None)
    out = _unfold_rows(out, groups, -3)
    if weights is not None:
      weights = _unfold_rows(weights, groups, -2)
    if capture:
      self.sow('intermediates', 'attention_weights', weights)
    out = HeadProjection(
        (self.out_features or features,), ('heads', 'kv', 'embed'),
        num_in_axes=2, use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, name='out')(out)
    return (out, weights) if return_weights else out

  def _rotary_positions(self, positions: Array | None, length: int) -> Array:
    """Given positions, else 0..T-1 after everything already cached."""
    if positions is not None:
      return positions
    start = 0
    if self.decode and self.has_variable('cache', 'cache_index'):
      start = self.get_variable('cache', 'cache_index')
    return start + jnp.arange(length)

  def _update_self_cache(self, key, value, mask, causal):
    """Writes the new keys/values into the cache; returns cache and mask."""
    initialized = self.has_variable('cache', 'cached_key')
    cached_key, cached_value = (
        self.variable('cache', name, jnp.zeros, _cached_shape(x, name),
                      x.dtype)
        for name, x in (('cached_key', key), ('cached_value', value)))
    index = self.variable('cache', 'cache_index',
                          lambda: jnp.array(0, jnp.int32))
    if not initialized:  # the call that creates the cache: plain forward
      return key, value, masks.combine_masks(
          mask, masks.causal_mask(key.shape[-3]) if causal else None)
    t, capacity = key.shape[-3], _capacity(cached_value.value)
    if t > capacity:
      raise ValueError(f'{t} new positions do not fit a KV cache of '
                       f'{capacity}; initialise the cache with a longer '
                       f'sequence.')
    start = index.value
    for variable, x in ((cached_key, key), (cached_value, value)):
      name = variable.name
      variable.value = jax.lax.dynamic_update_slice_in_dim(
          variable.value, _to_cache(x, name, variable.value.dtype), start,
          axis=_CACHE_AXES[name][1])
    index.value = start + t
    if self.has_variable('cache', 'beam_slots'):  # see `track_beams`
      self.put_variable('cache', 'beam_slots', beam_slots.record(
          self.get_variable('cache', 'beam_slots'), start, t))
    if causal:
      visible = masks.causal_mask(t, capacity, offset=start)
    else:  # every position written so far, e.g. a bidirectional prefix
      visible = (jnp.arange(capacity) < start + t)[None, :]
    masks.check(mask, (*key.shape[:-3], self.num_heads, t, capacity),
                '[..., N, T, S_cache]')
    return (_from_cache(cached_key.value, 'cached_key'),
            _from_cache(cached_value.value, 'cached_value'),
            masks.combine_masks(mask, visible))

  def _cross_cache(self, project_kv):
    """Encoder keys/values, projected once on the cache-creating call."""
    names = ('cross_key', 'cross_value')
    if self.has_variable('cache', names[0]):
      return tuple(_from_cache(self.get_variable('cache', name), name)
                   for name in names)
    key, value = project_kv()
    # The barrier keeps XLA from folding the layout change into every step
    # that reads the cache (where it would transpose again).
    stored = jax.lax.optimization_barrier(
        tuple(_to_cache(x, name) for x, name in zip((key, value), names)))
    for name, x in zip(names, stored):
      self.put_variable('cache', name, x)
    return key, value


def _shared_key_groups(query: Array, key: Array, mask: Array | None) -> int:
  """How many consecutive query rows share one row of cached keys."""
  rows, key_rows = query.shape[0], key.shape[0]
  if rows == key_rows:
    return 1
  if query.ndim != 4 or rows % key_rows:
    raise ValueError(
        f'Queries {query.shape} against cached cross-attention keys '
        f'{key.shape}: the query rows must be the key rows or a multiple of '
        f'them (beams of each example), with one batch axis.')
  if mask is not None and (mask.shape[0] not in (1, key_rows)
                           or mask.shape[-2] != 1):
    raise ValueError(
        f'A cross-attention mask {mask.shape} for keys shared by groups of '
        f'{rows // key_rows} query rows must be [{key_rows} or 1, ..., 1, S]: '
        f'the same for every query of an example.')
  return rows // key_rows


def _fold_rows(x: Array, groups: int) -> Array:
  """[B * G, T, ...] -> [B, G * T, ...]: each example's rows as queries."""
  return x.reshape(x.shape[0] // groups, groups * x.shape[1], *x.shape[2:])


def _unfold_rows(x: Array, groups: int, axis: int) -> Array:
  """Undoes `_fold_rows` on outputs [B, G * T, N, H] (axis -3) or weights
  [B, N, G * T, S] (axis -2): rows b * G + g again."""
  if groups == 1:
    return x
  axis = x.ndim + axis
  x = x.reshape(*x.shape[:axis], groups, -1, *x.shape[axis + 1:])
  x = jnp.moveaxis(x, axis, 1)
  return x.reshape(-1, *x.shape[2:])


# The KV caches are stored in the layouts the products of attention read,
# so that no decoding step transposes them (on a CPU, transposes of the
# [..., S, K, H] caches took a fifth of beam search's time; see
# docs/benchmarks.md): self-attention, one query per row, reads keys as
# [..., K, H, S] and values as [..., K, S, H]; cross-attention, whose
# queries are an example's beams, reads keys as [..., K, S, H] and values
# as [..., K, H, S]. Attention sees the usual [..., S, K, H]: the moves
# cancel under XLA. (moveaxis source and destination per cache variable.)
_CACHE_AXES = {'cached_key': (-3, -1), 'cached_value': (-3, -2),
               'cross_key': (-3, -2), 'cross_value': (-3, -1)}


def _capacity(cached_value: Array) -> int:
  """Positions a self-attention value cache holds."""
  return cached_value.shape[_CACHE_AXES['cached_value'][1]]


def _cached_shape(x: Array, name: str) -> tuple[int, ...]:
  """The shape of cache variable `name` for keys or values [..., S, K, H]."""
  return jax.eval_shape(lambda y: _to_cache(y, name), x).shape


def _to_cache(x: Array, name: str, dtype=None) -> Array:
  """Keys or values [..., S, K, H] in the layout of cache variable `name`."""
  return jnp.moveaxis(x, *_CACHE_AXES[name]).astype(dtype or x.dtype)


def _from_cache(x: Array, name: str) -> Array:
  """Cache variable `name` back to [..., S, K, H]."""
  return jnp.moveaxis(x, *reversed(_CACHE_AXES[name]))


_CROSS_CACHE = ('cross_key', 'cross_value')
_SELF_CACHE = ('cached_key', 'cached_value')


def track_beams(cache: dict[str, Any], beam_size: int) -> dict[str, Any]:
  """A model's 'cache' collection with a beam-slot map (`beam_slots`) in
  every self-attention layer, whose keys and values beam search then never
  copies (`split_cache` sets them apart); for a cache of one row per
  example, before beam search tiles it."""
  flat = traverse_util.flatten_dict(cache)
  for path, value in list(flat.items()):
    if path[-1] == 'cached_value':
      flat[(*path[:-1], 'beam_slots')] = beam_slots.initial(
          value.shape[0], beam_size, _capacity(value))
  return traverse_util.unflatten_dict(flat)


def tracked_beams(cache: dict[str, Any]) -> int:
  """The beam size a 'cache' collection's beam-slot maps are for; 1 when it
  has none (`track_beams`)."""
  return max((x.shape[1] for path, x in traverse_util.flatten_dict(
      cache).items() if path[-1] == 'beam_slots'), default=1)


def split_cache(cache: dict[str, Any]) -> tuple[dict, dict, dict]:
  """A model's 'cache' collection -> the parts beam search treats apart:
  (what it reorders with the beams: cache indices, beam-slot maps and the
  keys/values of layers without a map; what stays in its slot: the
  keys/values of self-attention layers with a map; what an example's beams
  share: the cross-attention keys/values, projected once)."""
  flat = traverse_util.flatten_dict(cache)
  tracked = {path[:-1] for path in flat if path[-1] == 'beam_slots'}
  parts = ({}, {}, {})
  for path, value in flat.items():
    part = (2 if path[-1] in _CROSS_CACHE else
            1 if path[-1] in _SELF_CACHE and path[:-1] in tracked else 0)
    parts[part][path] = value
  return tuple(traverse_util.unflatten_dict(part) for part in parts)


def merge_caches(*caches: dict[str, Any]) -> dict[str, Any]:
  """The 'cache' collection whose parts `split_cache` returned."""
  flat = {}
  for cache in caches:
    flat.update(traverse_util.flatten_dict(cache))
  return traverse_util.unflatten_dict(flat)
