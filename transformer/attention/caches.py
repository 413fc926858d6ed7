"""The KV caches of multi-head attention: their layouts, and the parts
beam search treats apart (what it reorders with the beams, what stays in
a beam slot (`transformer.beam_slots`), what an example's beams share)."""

from __future__ import annotations

from typing import Any

from flax import traverse_util
import jax
import jax.numpy as jnp

from transformer.decoding import beam_slots

Array = jax.Array


# The KV caches are stored in the layouts the products of attention read,
# so that no decoding step transposes them (on a CPU, transposes of the
# [..., S, K, H] caches took a fifth of beam search's time; see
# docs/benchmarks.md): self-attention, one query per row, reads keys as
# [..., K, H, S] and values as [..., K, S, H]; cross-attention, whose
# queries are an example's beams, reads keys as [..., K, S, H] and values
# as [..., K, H, S]. Attention sees the usual [..., S, K, H]: the moves
# cancel under XLA. (moveaxis source and destination per cache variable.)
CACHE_AXES = {'cached_key': (-3, -1), 'cached_value': (-3, -2),
               'cross_key': (-3, -2), 'cross_value': (-3, -1)}


def capacity(cached_value: Array) -> int:
  """Positions a self-attention value cache holds."""
  return cached_value.shape[CACHE_AXES['cached_value'][1]]


def cached_shape(x: Array, name: str) -> tuple[int, ...]:
  """The shape of cache variable `name` for keys or values [..., S, K, H]."""
  return jax.eval_shape(lambda y: to_cache(y, name), x).shape


def to_cache(x: Array, name: str, dtype=None) -> Array:
  """Keys or values [..., S, K, H] in the layout of cache variable `name`."""
  return jnp.moveaxis(x, *CACHE_AXES[name]).astype(dtype or x.dtype)


def from_cache(x: Array, name: str) -> Array:
  """Cache variable `name` back to [..., S, K, H]."""
  return jnp.moveaxis(x, *reversed(CACHE_AXES[name]))


CROSS_CACHE = ('cross_key', 'cross_value')
SELF_CACHE = ('cached_key', 'cached_value')


def track_beams(cache: dict[str, Any], beam_size: int) -> dict[str, Any]:
  """A model's 'cache' collection with a beam-slot map (`beam_slots`) in
  every self-attention layer, whose keys and values beam search then never
  copies (`split_cache` sets them apart); for a cache of one row per
  example, before beam search tiles it."""
  flat = traverse_util.flatten_dict(cache)
  for path, value in list(flat.items()):
    if path[-1] == 'cached_value':
      flat[(*path[:-1], 'beam_slots')] = beam_slots.initial(
          value.shape[0], beam_size, capacity(value))
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
    part = (2 if path[-1] in CROSS_CACHE else
            1 if path[-1] in SELF_CACHE and path[:-1] in tracked else 0)
    parts[part][path] = value
  return tuple(traverse_util.unflatten_dict(part) for part in parts)


def merge_caches(*caches: dict[str, Any]) -> dict[str, Any]:
  """The 'cache' collection whose parts `split_cache` returned."""
  flat = {}
  for cache in caches:
    flat.update(traverse_util.flatten_dict(cache))
  return traverse_util.unflatten_dict(flat)
