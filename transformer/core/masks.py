"""Attention masks: boolean, True where a query may attend to a key,
broadcastable against the attention weights [..., N, T, S] (the letters of
`transformer.attention`): padding, no look-ahead (causal), the segments of
packed rows, and their combination; and `KeyLengths`, padding given as
lengths, which a fused kernel takes without a mask."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
# The logit of an id a model never predicts (`mask_padding`): finite, so
# that a zero loss weight on it stays zero, and far below any real logit.
MASKED_LOGIT = -1e9


def padding_mask(lengths: Array, max_length: int) -> Array:
  """Mask of the first `lengths[b]` keys of each batch element.

  Args:
    lengths: [...] int, number of valid keys per batch element.
    max_length: S, the padded key length.

  Returns:
    [..., 1, 1, S] bool, broadcastable against weights [..., N, T, S].
  """
  lengths = jnp.asarray(lengths)
  return (jnp.arange(max_length) < lengths[..., None])[..., None, None, :]


def causal_mask(query_length: int, key_length: int | None = None,
                offset: int | Array = 0) -> Array:
  """No look-ahead: query t (at position t + offset) sees keys s <= t + offset.

  Args:
    query_length: T.
    key_length: S, defaults to T.
    offset: position of the first query; a traced scalar in KV-cache
      decoding, where the queries are the newest positions of the cache.

  Returns:
    [T, S] bool.
  """
  key_length = query_length if key_length is None else key_length
  query_positions = jnp.arange(query_length)[:, None] + offset
  return jnp.arange(key_length)[None, :] <= query_positions


def combine_masks(*masks: Array | None) -> Array | None:
  """Logical AND of the masks that are not None (None if all are)."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  return functools.reduce(jnp.logical_and, masks)


def check(mask: Array | None, target_shape: tuple[int, ...],
                target: str) -> None:
  if mask is None:
    return
  if mask.dtype != jnp.bool_:
    raise ValueError(
        f'Attention masks must be boolean (True = may attend), got dtype '
        f'{mask.dtype}. Convert with `mask.astype(bool)`.')
  try:
    broadcast = np.broadcast_shapes(mask.shape, target_shape)
  except ValueError:
    broadcast = None
  if broadcast != tuple(target_shape):
    raise ValueError(
        f'Mask of shape {mask.shape} does not broadcast to the attention '
        f'weights {target} = {tuple(target_shape)}. Give per-example masks '
        f'head and query axes, e.g. padding_mask(lengths, S) is [B, 1, 1, S].')


def segment_mask(query_segments: Array, key_segments: Array) -> Array:
  """[B, T], [B, S] segment ids -> [B, 1, T, S]: same segment, key not pad."""
  same = query_segments[:, :, None] == key_segments[:, None, :]
  return (same & (key_segments[:, None, :] > 0))[:, None]


class KeyLengths(NamedTuple):
  """Padding as the number of real keys of each row, where a mask would be:
  `attention.MultiHeadAttention` hands it to the kernel as key lengths
  (cuDNN then skips the padded blocks rather than adding a [B, N, T, S]
  bias) and makes a mask of it where it needs one (KV-cache decoding).

  lengths: [B] int; keys at positions >= lengths[b] are padding. Only for
  rows padded at the end, which every batcher here makes (ids never hold
  the padding id 0 inside an example).
  """
  lengths: Array

  def mask(self, key_length: int) -> Array:
    """The same padding as a [B, 1, 1, S] mask."""
    return padding_mask(self.lengths, key_length)


def key_lengths(tokens: Array) -> KeyLengths:
  """[B, S] tokens padded at the end with 0 -> their `KeyLengths`."""
  return KeyLengths(jnp.sum(tokens > 0, axis=-1, dtype=jnp.int32))


def key_padding_mask(tokens: Array) -> Array:
  """[B, S] tokens -> [B, 1, 1, S], True at real (non-zero) tokens."""
  return (tokens > 0)[:, None, None, :]
