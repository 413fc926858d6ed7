"""Beam search over a KV cache that is never copied.

After each step of beam search, beam k of an example continues some beam
p(k) of that example. Moving the cache rows to follow (`x[parents]`) copies
every layer's whole KV cache at every step: on a CPU, a fifth of a
Transformer-base beam search went into those copies (docs/benchmarks.md).

Instead the cache rows become *slots*: row b * K + j (slot j of example b)
keeps, at position s, the keys and values that whichever beam sat in slot j
at step s computed, and nothing ever moves them. A self-attention layer
that tracks beams also keeps `slots` [rows, K, S] bool: for the beam now in
row b * K + k, which slot holds position s of its history (one True per
position). Beam search reorders only that map, as it reorders any other row
of the state; writing position s marks the row's own slot there.

Attention then scores each query against every slot of its example at every
position, [K, K * S] per example and head instead of [K, S] (K times the
products of a query with its own history, small beside the projections),
and the map keeps, at each position, the one slot of the query's history:
a softmax over (slot, position) with one slot per position unmasked is the
softmax over the history. Keys and values are read in the layout they are
stored in, once per step, as without beams.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def initial(rows: int, beam_size: int, capacity: int) -> Array:
  """[rows, K, S] map with slot 0 everywhere: positions written before the
  search (a prompt) are read from the example's first slot, which holds
  them as every slot does once beam search has tiled the rows."""
  return jnp.zeros((rows, beam_size, capacity), bool).at[:, 0].set(True)


def record(slots: Array, start: Array, length: int) -> Array:
  """The map after each row wrote positions start .. start + length - 1
  into its own slot (row r is slot r % K)."""
  rows, beam_size, _ = slots.shape
  own = (jnp.arange(rows) % beam_size)[:, None] == jnp.arange(beam_size)
  written = jnp.broadcast_to(own[:, :, None], (rows, beam_size, length))
  return jax.lax.dynamic_update_slice_in_dim(slots, written, start, axis=2)


def attention(query: Array, key: Array, value: Array, slots: Array,
              mask: Array | None, scale: float) -> tuple[Array, Array]:
  """Scaled dot-product attention of each beam over its own history.

  Args:
    query: [B * K, T, N, H], row b * K + k is beam k of example b.
    key: [B * K, S, Nk, H], row b * K + j is slot j (Nk divides N).
    value: [B * K, S, Nk, H_v].
    slots: [B * K, K, S] bool, the map above.
    mask: bool broadcastable to [B * K, N, T, S], the beams' own
      coordinates (visibility, padding of their history).
    scale: multiplies the logits.

  Returns:
    [B * K, T, N, H_v] outputs and [B * K, N, T, S] float32 weights, zero
    where masked; a query that may see nothing gives zeros.
  """
  rows, t, n, h = query.shape
  beams, s, kv_heads = slots.shape[1], key.shape[1], key.shape[2]
  if rows % beams:
    raise ValueError(
        f'A KV cache tracking beams of {beams} has {rows} rows, not a '
        f'multiple of {beams}: decode it with beam_search(beam_size='
        f'{beams}), or build the decoding state with beam_size=1.')
  b, g = rows // beams, n // kv_heads
  # Keys [rows, nk, h, s] and values [rows, nk, s, h]: the layouts the KV
  # cache stores (attention.caches.CACHE_AXES), whose moves cancel these under
  # XLA. The cache keeps its row axis throughout: a reshape of it (rows into
  # examples and slots) made XLA copy it to suit.
  keys, values = jnp.moveaxis(key, 1, 3), jnp.moveaxis(value, 1, 2)
  # Every slot scores all the queries of its example, q = (k, g, t), rows
  # and heads being the products' batch.
  queries = jnp.transpose(query.reshape(b, beams, t, kv_heads, g, h),
                          (0, 3, 1, 4, 2, 5)).reshape(b, kv_heads, -1, h)
  queries = jnp.repeat(queries, beams, axis=0)  # [rows, nk, q, h]
  logits = jnp.einsum('rnqh,rnhs->rnqs', queries, keys,
                      preferred_element_type=jnp.float32) * scale
  logits = logits.reshape(b, beams, kv_heads, beams, g, t, s)
  # Each query's logit at each position is that of the slot holding the
  # position in its history; then an ordinary softmax over positions.
  own = jnp.swapaxes(slots.reshape(b, beams, beams, s), 1, 2)  # [b, j, k, s]
  own = own[:, :, None, :, None, None, :]  # as the logits
  logits = jnp.where(own, logits, 0.0).sum(axis=1)  # [b, nk, k, g, t, s]
  if mask is not None:
    mask = jnp.swapaxes(jnp.broadcast_to(mask, (rows, n, t, s)).reshape(
        b, beams, kv_heads, g, t, s), 1, 2)
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  weights = jax.nn.softmax(logits, axis=-1)
  if mask is not None:
    weights = jnp.where(mask, weights, 0.0)
  # Each slot's values weighted where they are the history, summed over the
  # slots (contracting slots and positions in one product would transpose
  # the value cache).
  per_slot = jnp.where(own, weights[:, None], 0.0).astype(value.dtype)
  # Slots summed in float32: in bf16 each would round before the sum.
  out = jnp.einsum('rnqs,rnsh->rnqh', per_slot.reshape(rows, kv_heads, -1, s),
                   values, preferred_element_type=jnp.float32)
  out = out.reshape(b, beams, kv_heads, beams, g, t, -1).sum(axis=1)
  out = jnp.transpose(out, (0, 2, 4, 1, 3, 5))  # [b, k, t, nk, g, h]
  out = out.astype(value.dtype)
  weights = jnp.swapaxes(weights, 1, 2)  # [b, k, nk, g, t, s]
  return (out.reshape(rows, t, n, value.shape[-1]),
          weights.reshape(rows, n, t, s))
