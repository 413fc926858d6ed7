"""Attention over beam slots equals attention over each beam's history
gathered explicitly, and the map follows the beams as beam search moves
them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import attention
from transformer.decoding import beam_slots

EXAMPLES, BEAMS, LENGTH = 2, 3, 7

# Both attentions under jit, as decoding runs them: eagerly each of their
# operations compiles on its own, per shape.
slot_attention = jax.jit(beam_slots.attention, static_argnames='scale')
dot_product_attention = jax.jit(
    attention.dot_product_attention,
    static_argnames=('scale', 'implementation', 'return_weights'))


def random_map(rng):
  """[B * K, K, S] with one slot per position, chosen at random."""
  chosen = rng.integers(0, BEAMS, (EXAMPLES * BEAMS, LENGTH))
  return jnp.asarray(chosen[:, None, :] == np.arange(BEAMS)[None, :, None])


def histories(x, slots):
  """x [B * K, S, ...] -> each beam's history, read from its map's slots."""
  chosen = np.argmax(np.asarray(slots), axis=1)  # [B * K, S]
  example = np.arange(EXAMPLES * BEAMS)[:, None] // BEAMS
  # Gathered in NumPy: eagerly a jax gather compiles for each shape.
  return jnp.asarray(np.asarray(x)[example * BEAMS + chosen,
                                   np.arange(LENGTH)[None, :]])


@pytest.mark.parametrize('heads, kv_heads, queries, masked', [
    (4, 4, 1, 'none'), (4, 2, 1, 'rows'), (6, 1, 2, 'rows'),
    (4, 4, 1, 'shared')])
def test_slots_give_attention_over_the_gathered_history(heads, kv_heads,
                                                        queries, masked):
  rng = np.random.default_rng(0)
  rows = EXAMPLES * BEAMS
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  query = normal(rows, queries, heads, 8)
  key, value = normal(rows, LENGTH, kv_heads, 8), normal(rows, LENGTH,
                                                         kv_heads, 5)
  slots = random_map(rng)
  mask = None
  if masked == 'rows':  # padding of some histories, a query seeing nothing
    mask = rng.random((rows, 1, queries, LENGTH)) < 0.7
    mask[1, :, 0] = False
    mask = jnp.asarray(mask)
  elif masked == 'shared':  # what decoding passes: positions written so far
    mask = (jnp.arange(LENGTH) < 5)[None, None, None, :]
  out, weights = slot_attention(query, key, value, slots, mask, scale=0.3)
  expected, expected_weights = dot_product_attention(
      query, histories(key, slots), histories(value, slots), mask=mask,
      scale=0.3, implementation='einsum', return_weights=True)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(weights, expected_weights, rtol=1e-5,
                             atol=1e-6)
  if masked == 'rows':
    assert not np.asarray(out[1, 0]).any()
  if masked == 'shared':
    assert not np.asarray(weights[..., 5:]).any()


def test_bfloat16_slots_stay_as_close_to_float32_as_ordinary_attention():
  """In bfloat16 the slot path returns bfloat16 and is about as far from
  the float32 result as the ordinary einsum path on gathered histories."""
  rng = np.random.default_rng(2)
  rows = EXAMPLES * BEAMS
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  query, key, value = (normal(rows, 1, 4, 8), normal(rows, LENGTH, 4, 8),
                       normal(rows, LENGTH, 4, 8))
  slots = random_map(rng)
  exact, _ = slot_attention(query, key, value, slots, None, scale=0.3)
  half = lambda x: x.astype(jnp.bfloat16)
  out, _ = slot_attention(half(query), half(key), half(value), slots, None,
                          scale=0.3)
  assert out.dtype == jnp.bfloat16
  reference = dot_product_attention(
      half(query), half(histories(key, slots)), half(histories(value, slots)),
      scale=0.3, implementation='einsum')
  error = np.abs(np.asarray(out, np.float32) - exact).max()
  reference_error = np.abs(np.asarray(reference, np.float32) - exact).max()
  assert error <= 1.5 * reference_error + 1e-3, (error, reference_error)


def test_record_marks_each_rows_own_slot_where_it_wrote():
  slots = beam_slots.initial(EXAMPLES * BEAMS, BEAMS, LENGTH)
  slots = beam_slots.record(slots, jnp.int32(2), 2)
  chosen = np.argmax(np.asarray(slots), axis=1)
  own = np.arange(EXAMPLES * BEAMS) % BEAMS
  np.testing.assert_array_equal(chosen[:, 2:4], np.stack([own, own], 1))
  assert not chosen[:, :2].any() and not chosen[:, 4:].any()  # slot 0
  assert (np.asarray(slots).sum(axis=1) == 1).all()


def test_reordered_map_reads_what_reordering_the_cache_reads():
  """Beam search moves rows of the map only; the keys stay where they were
  written. Both ways give every beam the same history."""
  rng = np.random.default_rng(1)
  rows = EXAMPLES * BEAMS
  cache = jnp.zeros((rows, LENGTH))  # the classic cache, moved each step
  written = jnp.zeros((rows, LENGTH))  # slots, never moved
  slots = beam_slots.initial(rows, BEAMS, LENGTH)
  for step in range(LENGTH):
    new = jnp.asarray(rng.standard_normal(rows), jnp.float32)
    cache = cache.at[:, step].set(new)
    written = written.at[:, step].set(new)
    slots = beam_slots.record(slots, jnp.int32(step), 1)
    parents = (np.arange(rows) // BEAMS * BEAMS
               + rng.integers(0, BEAMS, rows))
    cache, slots = cache[parents], slots[parents]
    np.testing.assert_array_equal(
        histories(written, slots)[:, :step + 1], cache[:, :step + 1])


def test_rows_that_are_not_whole_examples_are_refused():
  slots = beam_slots.initial(4, 3, LENGTH)
  x = jnp.zeros((4, LENGTH, 2, 8))
  with raises_naming(ValueError, 'beams of 3', '4 rows', 'beam_size=3',
                     'beam_size=1'):
    beam_slots.attention(jnp.zeros((4, 1, 2, 8)), x, x, slots, None, 1.0)
