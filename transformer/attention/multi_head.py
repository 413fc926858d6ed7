"""Multi-head attention (Vaswani et al. 2017): head projections, self-
and cross-attention with grouped key/value heads, rotary positions, and
the KV cache of decoding (`caches`) read without copies during beam
search (`transformer.beam_slots`)."""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.attention import caches
from transformer.attention import kernels
from transformer.attention import lora as lora_lib
from transformer.core import masks
from transformer.core import positional
from transformer.decoding import beam_slots

Array = jax.Array
Dtype = Any


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
  lora: lora_lib.Lora | None = None  # a low-rank adapter beside the kernel

  @nn.compact
  def __call__(self, x: Array, deterministic: bool = True) -> Array:
    """`deterministic`: no adapter dropout."""
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
    if self.lora is not None:
      y = y + lora_lib.update(self, x, n_in, self.out_shape, self.lora,
                              deterministic, self.dtype)
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
  implementation: str = 'auto'
  decode: bool = False
  rotary: bool = False
  rope: positional.Rope = positional.Rope()
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  lora: lora_lib.Lora | None = None  # adapters on `lora.targets`

  def _adapter(self, name: str) -> lora_lib.Lora | None:
    return self.lora if self.lora and name in self.lora.targets else None

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
    if self.implementation not in kernels.IMPLEMENTATIONS:
      raise ValueError(f'Unknown attention implementation '
                       f'{self.implementation!r}; choose one of '
                       f'{kernels.IMPLEMENTATIONS}.')
    return num_kv_heads, self.head_dim or features // self.num_heads

  def _projection(self, heads: int, head_dim: int, name: str) -> nn.Module:
    return HeadProjection((heads, head_dim), ('embed', 'heads', 'kv'),
                          use_bias=self.use_bias, dtype=self.dtype,
                          param_dtype=self.param_dtype,
                          lora=self._adapter(name), name=name)

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
    query = self._projection(self.num_heads, head_dim, 'query')(
        inputs_q, deterministic)
    project_kv = lambda: (
        self._projection(num_kv_heads, head_dim, 'key')(kv_source,
                                                        deterministic),
        self._projection(num_kv_heads, self.value_head_dim or head_dim,
                         'value')(kv_source, deterministic))

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
      result = kernels.dot_product_attention(
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
        param_dtype=self.param_dtype, lora=self._adapter('out'),
        name='out')(out, deterministic)
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
        self.variable('cache', name, jnp.zeros, caches.cached_shape(x, name),
                      x.dtype)
        for name, x in (('cached_key', key), ('cached_value', value)))
    index = self.variable('cache', 'cache_index',
                          lambda: jnp.array(0, jnp.int32))
    if not initialized:  # the call that creates the cache: plain forward
      return key, value, masks.combine_masks(
          mask, masks.causal_mask(key.shape[-3]) if causal else None)
    t, capacity = key.shape[-3], caches.capacity(cached_value.value)
    if t > capacity:
      raise ValueError(f'{t} new positions do not fit a KV cache of '
                       f'{capacity}; initialise the cache with a longer '
                       f'sequence.')
    start = index.value
    for variable, x in ((cached_key, key), (cached_value, value)):
      name = variable.name
      variable.value = jax.lax.dynamic_update_slice_in_dim(
          variable.value, caches.to_cache(x, name, variable.value.dtype), start,
          axis=caches.CACHE_AXES[name][1])
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
    return (caches.from_cache(cached_key.value, 'cached_key'),
            caches.from_cache(cached_value.value, 'cached_value'),
            masks.combine_masks(mask, visible))

  def _cross_cache(self, project_kv):
    """Encoder keys/values, projected once on the cache-creating call."""
    names = ('cross_key', 'cross_value')
    if self.has_variable('cache', names[0]):
      return tuple(caches.from_cache(self.get_variable('cache', name), name)
                   for name in names)
    key, value = project_kv()
    # The barrier keeps XLA from folding the layout change into every step
    # that reads the cache (where it would transpose again).
    stored = jax.lax.optimization_barrier(
        tuple(caches.to_cache(x, name) for x, name in zip((key, value), names)))
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
