"""Dot-product attention and the choice of its kernel: the einsum
reference (which alone returns weights and applies attention dropout;
causal self-attention in two query halves), and the fused kernels of
`jax.nn.dot_product_attention` (XLA's, cuDNN's). A named kernel is the
one that runs; only 'auto' chooses, and says once what it chose. Shapes
and masks as the package docstring says."""

from __future__ import annotations

import functools
import math
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp

from transformer import errors
from transformer.core import masks

Array = jax.Array
Dtype = Any

IMPLEMENTATIONS = ('auto', 'xla', 'einsum', 'cudnn')
# What 'auto' chose, per platform and reason, already logged.
_LOGGED: set[tuple[str, str, str]] = set()


def masked_softmax(logits: Array, mask: Array | None) -> Array:
  """Softmax over the last axis; masked entries and fully masked rows are 0."""
  if mask is None:
    return jax.nn.softmax(logits, axis=-1)
  # The finite minimum (not -inf) keeps fully masked rows free of NaN in both
  # the forward and the backward pass; the final `where` zeroes them exactly.
  logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  return jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)


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


def target_platform() -> str:
  """The platform the program being traced will run on: the active mesh's
  (a plan traces on a CPU for a TPU or GPU topology's devices), else JAX's
  default backend. 'gpu' for NVIDIA's."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else getattr(mesh, 'abstract_device', None)
  platform = getattr(device, 'platform', None) or jax.default_backend()
  return 'gpu' if platform in ('cuda', 'rocm') else platform


def _cudnn_may_run(query: Array, key: Array, value: Array) -> bool:
  """The documented cuDNN flash-attention constraints, checked up front."""
  head_dim = query.shape[-1]
  return (target_platform() == 'gpu'
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
  if implementation == 'cudnn' and target_platform() != 'gpu':
    raise ValueError(
        f"implementation='cudnn' needs a GPU, but the program runs on "
        f"{target_platform()!r}; use 'auto' to take cuDNN where it can "
        f"run and XLA elsewhere.")
  if implementation == 'auto':
    implementation = 'xla'
    if _cudnn_may_run(query, key, value):
      try:
        out = call(implementation='cudnn').reshape(query.shape)
        _log_choice('cudnn', 'a GPU, and cuDNN takes these shapes')
        return out
      except (ValueError, NotImplementedError, RuntimeError) as e:
        _log_choice('xla', f'cuDNN rejected q={query.shape} k={key.shape} '
                    f'({errors.first_line(e)})')
    else:
      _log_choice('xla', "cuDNN's constraints do not hold (bfloat16 or "
                  'float16, head dim a multiple of 8 and at most 128)')
  return call(implementation=implementation).reshape(query.shape)


def _log_choice(kernel: str, reason: str) -> None:
  """Logs what 'auto' runs, once per platform, kernel and reason."""
  seen = (target_platform(), kernel, reason)
  if seen not in _LOGGED:
    _LOGGED.add(seen)
    logging.info("attention_implementation='auto' runs %r on %s: %s.",
                 kernel, seen[0], reason)


def choose(implementation: str, *, head_dims_differ: bool, dropout: bool,
           return_weights: bool) -> str:
  """The kernel that runs for a named `implementation`: itself, or for
  'auto' the einsum path on a CPU (faster there than jax's kernels, whose
  grouped layout adds a transpose and a select per layer and pass;
  docs/benchmarks.md), XLA's on a TPU, and on a GPU 'auto' still, to take
  cuDNN where it accepts the inputs at trace time (`_fused_attention`).
  Weights come from the einsum path whichever is named; attention dropout
  and value heads wider or narrower than the keys' run only there, so a
  fused kernel named for them is refused."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f'Unknown attention implementation {implementation!r}; '
                     f'choose one of {IMPLEMENTATIONS}.')
  if return_weights:
    return 'einsum'
  only_einsum = ('attention dropout' if dropout else
                 "value heads of another size than the keys'"
                 if head_dims_differ else None)
  if implementation != 'auto':
    if only_einsum and implementation != 'einsum':
      raise ValueError(
          f"implementation={implementation!r} cannot run {only_einsum}: "
          f"only the einsum kernel does. Use 'auto' or 'einsum'"
          f"{', or an attention dropout rate of 0' if dropout else ''}.")
    return implementation
  platform = target_platform()
  if only_einsum:
    _log_choice('einsum', only_einsum)
    return 'einsum'
  if platform == 'cpu':
    _log_choice('einsum', 'faster than the fused kernels on a CPU')
    return 'einsum'
  if platform != 'gpu':
    _log_choice('xla', 'no cuDNN off a GPU')
    return 'xla'
  return 'auto'  # on a GPU: cuDNN where it takes the inputs when traced


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    *,
    mask: Array | None = None,
    key_lengths: Array | None = None,
    causal: bool = False,
    scale: float | None = None,
    implementation: str = 'auto',
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
  dropout = dropout_rng is not None and dropout_rate > 0.0
  kernel = choose(implementation, head_dims_differ=value.shape[-1] !=
                  query.shape[-1], dropout=dropout,
                  return_weights=return_weights)
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
  if kernel == 'einsum':
    if causal and t == s and t % 2 == 0 and not return_weights:
      return _causal_halves(query, key, value, combined, scale, dropout_rate,
                            dropout_rng if dropout else None)
    out, weights = _einsum_attention(query, key, value, combined, scale,
                                     dropout_rate, dropout_rng)
    return (out, weights) if return_weights else out
  # The kernels average all values for a fully masked row; zero it instead.
  return _zero_fully_masked_rows(
      _fused_attention(query, key, value, mask, key_lengths, causal, scale,
                       kernel), combined, weights_shape)
