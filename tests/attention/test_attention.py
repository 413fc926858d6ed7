"""Properties of attention stated in the lectures, and its error messages."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import attention
from transformer.core import masks
from transformer.core import positional

IMPLS = ('einsum', 'xla', 'auto')

# Most of these tests' time was compiling: eagerly each operation compiles
# on its own, per shape. Under jit a call is one program, reused by every
# call of the same shapes and static arguments. The tests of what happens
# eagerly (error messages, what reaches the kernel, a patched backend) call
# the library itself.
dot_product_attention = jax.jit(
    attention.dot_product_attention,
    static_argnames=('causal', 'scale', 'implementation', 'dropout_rate',
                     'return_weights'))


@functools.partial(jax.jit, static_argnums=0, static_argnames=(
    'deterministic', 'causal', 'return_weights', 'mutable', 'method'))
def apply(module, variables, *args, **kwargs):
  """`module.apply` under jit; `mutable` a tuple (static)."""
  return module.apply(variables, *args, **kwargs)


def normal(seed, *shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def reference_attention(q, k, v, mask=None, scale=None):
  """float64 NumPy: E = Q K^T * scale, A = softmax(E), Y = A V, per head."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  b, t, n, h = q.shape
  group = n // k.shape[2]
  k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
  logits = np.einsum('btnh,bsnh->bnts', q, k) * (scale or h**-0.5)
  mask = np.ones(logits.shape, bool) if mask is None else np.broadcast_to(
      np.asarray(mask), logits.shape)
  logits = np.where(mask, logits, -np.inf)
  peak = np.max(logits, axis=-1, keepdims=True)
  peak = np.where(np.isfinite(peak), peak, 0.0)
  weights = np.exp(logits - peak) * mask
  total = weights.sum(-1, keepdims=True)
  weights = np.divide(weights, total, out=np.zeros_like(weights),
                      where=total > 0)
  return np.einsum('bnts,bsnh->btnh', weights, v), weights


def random_mask(seed, b, t, s):
  """A random [B, 1, T, S] mask with one query row fully masked."""
  mask = np.random.default_rng(seed).random((b, 1, t, s)) > 0.4
  mask[0, 0, 1] = False
  return jnp.asarray(mask)


def mask_cases(b, t, s):
  lengths = jnp.asarray([s, 0] + [s - 2] * (b - 2))
  return {
      'none': (None, None, False),
      'padding': (None, lengths, False),
      'causal': (None, None, True),
      'padding+causal': (None, lengths, True),
      'arbitrary+causal': (random_mask(0, b, t, s), None, True),
  }


def combined(mask, lengths, causal, t, s):
  return masks.combine_masks(
      mask, None if lengths is None else masks.padding_mask(lengths, s),
      masks.causal_mask(t, s) if causal else None)


@pytest.mark.parametrize('kind', list(mask_cases(3, 5, 7)))
def test_weights_are_probabilities_and_masked_keys_get_zero(kind):
  b, t, s = 3, 5, 7
  mask, lengths, causal = mask_cases(b, t, s)[kind]
  _, weights = dot_product_attention(
      normal(0, b, t, 4, 8), normal(1, b, s, 4, 8), normal(2, b, s, 4, 8),
      mask=mask, key_lengths=lengths, causal=causal, return_weights=True)
  weights = np.asarray(weights)
  full = np.broadcast_to(
      np.ones((1, 1, t, s), bool) if kind == 'none'
      else np.asarray(combined(mask, lengths, causal, t, s)), weights.shape)
  assert np.all((weights >= 0) & (weights <= 1))
  assert np.all(weights[~full] == 0.0)  # exactly zero, not just small
  sums = weights.sum(-1)
  has_key = full.any(-1)
  np.testing.assert_allclose(sums[has_key], 1.0, rtol=1e-6)
  np.testing.assert_array_equal(sums[~has_key], 0.0)
  if kind != 'none':
    assert not full.all(), 'the case must mask some keys'
  if kind not in ('none', 'causal'):
    assert not has_key.all(), 'the case must contain a fully masked row'


@pytest.mark.parametrize('impl', IMPLS)
def test_fully_masked_rows_give_zeros_and_finite_gradients(impl):
  q, k, v = normal(0, 2, 3, 2, 4), normal(1, 2, 5, 2, 4), normal(2, 2, 5, 2, 4)
  lengths = jnp.asarray([0, 3])  # the first example has no keys at all
  f = lambda q, k, v: attention.dot_product_attention(
      q, k, v, key_lengths=lengths, implementation=impl)
  out = jax.jit(f)(q, k, v)
  np.testing.assert_array_equal(out[0], 0.0)
  assert np.abs(np.asarray(out[1])).min() > 0
  grads = jax.jit(jax.grad(lambda *a: f(*a).sum(), argnums=(0, 1, 2)))(q, k, v)
  assert all(np.isfinite(g).all() for g in grads)


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('kind', list(mask_cases(3, 5, 7)))
@pytest.mark.parametrize('kv_heads', [4, 2, 1])
def test_matches_float64_numpy_reference(impl, kind, kv_heads):
  b, t, s = 3, 5, 7
  mask, lengths, causal = mask_cases(b, t, s)[kind]
  q, k, v = (normal(0, b, t, 4, 8), normal(1, b, s, kv_heads, 8),
             normal(2, b, s, kv_heads, 8))
  out = jax.jit(lambda q, k, v: attention.dot_product_attention(
      q, k, v, mask=mask, key_lengths=lengths, causal=causal,
      implementation=impl))(q, k, v)
  expected, _ = reference_attention(q, k, v, combined(mask, lengths, causal,
                                                      t, s))
  error = np.abs(np.asarray(out, np.float64) - expected).max()
  assert error / np.abs(expected).max() < 1e-5


@pytest.mark.parametrize('kind', ['causal', 'padding+causal',
                                  'arbitrary+causal'])
@pytest.mark.parametrize('kv_heads', [4, 2, 1])
def test_causal_self_attention_in_halves_matches_the_whole(kind, kv_heads):
  """Causal self-attention runs as two query halves (`_causal_halves`):
  outputs equal the float64 reference, gradients those of the same mask
  given whole (no `causal` flag, so no split)."""
  b, t = 3, 8
  mask, lengths, _ = mask_cases(b, t, t)[kind]
  whole = combined(mask, lengths, True, t, t)
  q, k, v = (normal(0, b, t, 4, 8), normal(1, b, t, kv_heads, 8),
             normal(2, b, t, kv_heads, 8))
  cotangent = normal(3, b, t, 4, 8)

  def loss(q, k, v, split):
    out = attention.dot_product_attention(
        q, k, v, mask=mask if split else whole,
        key_lengths=lengths if split else None, causal=split,
        implementation='einsum')
    return jnp.sum(out * cotangent), out

  (_, out), grads = jax.jit(jax.value_and_grad(
      lambda *a: loss(*a, True), argnums=(0, 1, 2), has_aux=True))(q, k, v)
  expected, _ = reference_attention(q, k, v, whole)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
  want = jax.jit(jax.grad(lambda *a: loss(*a, False)[0],
                          argnums=(0, 1, 2)))(q, k, v)
  for got, wanted in zip(grads, want):
    np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-6)


def test_causal_self_attention_never_scores_the_masked_quarter():
  """No product in the forward or backward pass has [T, T] scores: the
  first half's queries meet only the first half's keys."""
  q = k = v = normal(0, 2, 8, 3, 6)  # B 2, T 8, N 3, H 6: scores [2, 3, 8, 8]
  jaxpr = jax.make_jaxpr(jax.grad(lambda q, k, v: jnp.sum(
      attention.dot_product_attention(q, k, v, causal=True,
                                      implementation='einsum')),
                                  argnums=(0, 1, 2)))(q, k, v)
  shapes = [var.aval.shape for eqn in jaxpr.eqns
            if eqn.primitive.name == 'dot_general' for var in eqn.outvars]
  assert (2, 3, 4, 4) in shapes and (2, 3, 4, 8) in shapes
  assert (2, 3, 8, 8) not in shapes, shapes


@pytest.mark.parametrize('causal', [False, True])
def test_equals_jax_nn_dot_product_attention(causal):
  q, k, v = normal(0, 2, 6, 4, 8), normal(1, 2, 6, 2, 8), normal(2, 2, 6, 2, 8)
  lengths = jnp.asarray([6, 4], jnp.int32)
  expected = jax.jit(jax.nn.dot_product_attention,
                     static_argnames='is_causal')(
                         q, k, v, is_causal=causal,
                         key_value_seq_lengths=lengths)
  for impl in IMPLS:
    out = dot_product_attention(q, k, v, key_lengths=lengths, causal=causal,
                                implementation=impl)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_plain_dot_product_uses_no_scale():
  q, k, v = normal(0, 1, 3, 1, 16), normal(1, 1, 4, 1, 16), normal(2, 1, 4, 1, 16)
  out = dot_product_attention(q, k, v, scale=1.0)
  expected, _ = reference_attention(q, k, v, scale=1.0)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
  scaled = dot_product_attention(q, k, v)
  assert np.abs(np.asarray(scaled) - expected).max() > 1e-2


def test_extra_leading_batch_dimensions():
  q, k, v = normal(0, 2, 3, 5, 2, 4), normal(1, 2, 3, 6, 2, 4), normal(
      2, 2, 3, 6, 2, 4)
  mask = jnp.asarray(np.random.default_rng(3).random((2, 3, 1, 5, 6)) > 0.3)
  for impl in IMPLS:
    out = dot_product_attention(q, k, v, mask=mask, implementation=impl)
    for i in range(2):  # sliced in NumPy: no jax program per index
      expected, _ = reference_attention(*(np.asarray(a)[i]
                                          for a in (q, k, v, mask)))
      np.testing.assert_allclose(out[i], expected, rtol=1e-5, atol=1e-6)


def test_bf16_within_bf16_tolerance_of_float32():
  q, k, v = normal(0, 2, 16, 4, 32), normal(1, 2, 16, 4, 32), normal(
      2, 2, 16, 4, 32)
  lengths = jnp.asarray([16, 9])
  for impl in IMPLS:
    f = lambda q, k, v: dot_product_attention(
        q, k, v, key_lengths=lengths, causal=True, implementation=impl)
    full = f(q, k, v)
    half = f(*(a.astype(jnp.bfloat16) for a in (q, k, v)))
    assert half.dtype == jnp.bfloat16
    # bf16 has an 8-bit mantissa: 2^-8 relative per rounding, a few roundings.
    np.testing.assert_allclose(half.astype(jnp.float32), full, atol=4e-2,
                               rtol=4e-2)


_SEGMENTS = jnp.asarray([[1, 1, 1, 2, 2, 2], [1, 1, 2, 2, 2, 2]])
# (queries, mask, key lengths, causal): the ways masks reach the kernel.
_KERNEL_MASKING = {
    'lengths+causal': (6, None, [6, 0], True),
    'segments+lengths+causal': (
        6, masks.segment_mask(_SEGMENTS, _SEGMENTS), [5, 0], True),
    'padding mask [B,1,1,S]': (6, masks.padding_mask(jnp.asarray([4, 0]), 6),
                               None, False),
    'lengths, fewer queries than keys': (3, None, [2, 6], False),
    'causal, fewer queries than keys': (4, None, None, True),
}


@pytest.mark.parametrize('groups', [1, 2])
@pytest.mark.parametrize('masking', list(_KERNEL_MASKING))
def test_jax_kernel_matches_the_einsum_path(groups, masking, monkeypatch):
  """jax's kernel, which 'auto' takes on a TPU, against the einsum path
  (the backend reported as a TPU's), with key lengths and causality passed
  to the kernel as arguments, fully masked rows included."""
  t, mask, lengths, causal = _KERNEL_MASKING[masking]
  q = normal(0, 2, t, 4, 8)
  k, v = (normal(i, 2, 6, 4 // groups, 8) for i in (1, 2))
  # Under jit, a new function for each path: the patched backend is read
  # while tracing the kernel's.
  f = lambda impl: jax.jit(lambda q, k, v: attention.dot_product_attention(
      q, k, v, mask=mask, causal=causal, implementation=impl,
      key_lengths=None if lengths is None else jnp.asarray(lengths)))(q, k, v)
  reference = f('einsum')
  monkeypatch.setattr(jax, 'default_backend', lambda: 'tpu')
  fused = f('auto')
  np.testing.assert_allclose(fused, reference, atol=1e-5)
  if lengths is not None and 0 in lengths:
    assert not np.asarray(fused[1]).any()  # a sequence with no keys


@pytest.mark.skipif(jax.default_backend() != 'gpu', reason='needs a GPU')
@pytest.mark.parametrize('causal', [False, True])
def test_cudnn_matches_xla_on_gpu(causal):
  q, k, v = (normal(i, 2, 256, 8, 64, dtype=jnp.bfloat16) for i in range(3))
  lengths = jnp.asarray([256, 100])
  f = lambda impl: attention.dot_product_attention(
      q, k, v, key_lengths=lengths, causal=causal, implementation=impl)
  np.testing.assert_allclose(f('cudnn').astype(jnp.float32),
                             f('xla').astype(jnp.float32), atol=2e-2,
                             rtol=2e-2)
  np.testing.assert_array_equal(f('auto'), f('cudnn'))


@pytest.mark.skipif(jax.default_backend() != 'gpu', reason='needs a GPU')
def test_cudnn_gradients_match_xla_on_gpu_for_packed_rows():
  """Training takes the kernel's backward pass: with two packed examples per
  row (a segment mask) and causal masking, cuDNN's gradients of all three
  inputs agree with XLA's."""
  q, k, v = (normal(i, 2, 128, 4, 64, dtype=jnp.bfloat16) for i in range(3))
  segments = jnp.repeat(jnp.asarray([[1, 2], [1, 1]]), 64, axis=1)
  mask = masks.segment_mask(segments, segments)

  def grads(impl):
    loss = lambda q, k, v: (attention.dot_product_attention(
        q, k, v, mask=mask, causal=True, implementation=impl).astype(
            jnp.float32) ** 2).sum()
    return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

  for cudnn, xla in zip(grads('cudnn'), grads('xla')):
    np.testing.assert_allclose(cudnn.astype(jnp.float32),
                               xla.astype(jnp.float32), atol=5e-2, rtol=5e-2)
    assert np.abs(np.asarray(xla, np.float32)).max() > 0.1  # not vacuous


def test_a_named_kernel_is_the_one_that_runs(monkeypatch):
  """'xla' runs jax's kernel on a CPU too, 'einsum' the reference; only
  'auto' chooses (the einsum path on a CPU)."""
  q, k = normal(0, 2, 4, 2, 8), normal(1, 2, 6, 2, 8)
  ran = []
  einsum = attention.kernels._einsum_attention  # pylint: disable=protected-access
  monkeypatch.setattr(attention.kernels, '_einsum_attention',
                      lambda *a: ran.append('einsum') or einsum(*a))
  fused = attention.kernels._fused_attention  # pylint: disable=protected-access
  monkeypatch.setattr(attention.kernels, '_fused_attention',
                      lambda *a: ran.append(a[-1]) or fused(*a))
  for name in ('xla', 'einsum', 'auto'):
    attention.dot_product_attention(q, k, k, implementation=name)
  assert ran == ['xla', 'einsum', 'einsum']
  monkeypatch.setattr(jax, 'default_backend', lambda: 'tpu')
  attention.dot_product_attention(q, k, k, implementation='auto')
  assert ran[-1] == 'xla'


def test_auto_logs_its_choice_once(caplog):
  attention.kernels._LOGGED.clear()  # pylint: disable=protected-access
  q = normal(0, 1, 4, 2, 8)
  with caplog.at_level('INFO'):
    for _ in range(3):
      attention.dot_product_attention(q, q, q, implementation='auto')
  said = [r.getMessage() for r in caplog.records
          if 'attention_implementation' in r.getMessage()]
  assert said == ["attention_implementation='auto' runs 'einsum' on cpu: "
                  'faster than the fused kernels on a CPU.']


def test_fused_kernels_refuse_what_only_einsum_runs():
  q = normal(0, 1, 4, 2, 8)
  for name in ('xla', 'cudnn'):
    with raises_naming(ValueError, f"implementation='{name}'",
                       'attention dropout', "'auto'"):
      attention.dot_product_attention(
          q, q, q, implementation=name, dropout_rate=0.1,
          dropout_rng=jax.random.key(0))
    with raises_naming(ValueError, f"implementation='{name}'", 'value heads',
                       "'auto'"):
      attention.dot_product_attention(q, q, normal(1, 1, 4, 2, 4),
                                      implementation=name)
  # 'auto' takes the einsum path for both; weights come from it whatever
  # is named.
  out = attention.dot_product_attention(
      q, q, q, implementation='auto', dropout_rate=0.5,
      dropout_rng=jax.random.key(0))
  assert out.shape == q.shape
  _, weights = attention.dot_product_attention(q, q, q, implementation='xla',
                                               return_weights=True)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_cudnn_without_gpu_says_so():
  if jax.default_backend() == 'gpu':
    pytest.skip('a GPU is present')
  q = normal(0, 1, 4, 2, 8)
  with raises_naming(ValueError, "implementation='cudnn'", 'GPU', "'cpu'",
                     "'auto'"):
    attention.dot_product_attention(q, q, q, implementation='cudnn')


# ----------------------------------------------------------------------------
# Multi-head attention
# ----------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0, static_argnames='deterministic')
def init(module, *inputs, **kwargs):
  """Unboxed variables of `module`, under jit as `apply`."""
  return nn.unbox(module.init(jax.random.key(0), *inputs, **kwargs))


def init_mha(module, *inputs):
  return init(module, *inputs, deterministic=True)


def test_self_attention_is_permutation_equivariant_without_positions():
  x = normal(0, 2, 7, 16)
  perm = np.random.default_rng(1).permutation(7)
  mha = attention.MultiHeadAttention(num_heads=4)
  params = init_mha(mha, x)
  f = lambda x: apply(mha, params, x, deterministic=True)
  np.testing.assert_allclose(f(x[:, perm]), f(x)[:, perm], rtol=1e-5,
                             atol=1e-6)
  # Adding positions first breaks equivariance: f(s(x) + P) != s(f(x + P)).
  pe = positional.PositionalEncoding(max_length=7)
  g = lambda x: f(pe.apply({}, x))
  assert np.abs(np.asarray(g(x[:, perm]) - g(x)[:, perm])).max() > 1e-2


def test_key_lengths_reach_the_kernel_and_attend_as_their_padding_mask(
    monkeypatch):
  x, memory = normal(0, 3, 5, 16), normal(1, 3, 7, 12)
  lengths = jnp.asarray([7, 3, 0])  # the last row has no key at all
  padding = masks.KeyLengths(lengths)
  seen = []
  kernel = attention.dot_product_attention
  # Where MultiHeadAttention calls it.
  monkeypatch.setattr(attention.kernels, 'dot_product_attention',
                      lambda *a, **k: seen.append(k) or kernel(*a, **k))
  for inputs, s in (((x,), 5), ((x, memory), 7)):  # self, cross
    lengths_s = jnp.minimum(lengths, s)
    mha = attention.MultiHeadAttention(num_heads=4)
    params = init_mha(mha, *inputs)
    f = lambda mask: mha.apply(params, *inputs, mask=mask,
                               deterministic=True)
    got = f(masks.KeyLengths(lengths_s))
    assert seen[-1]['mask'] is None  # lengths, not a mask, reach the kernel
    np.testing.assert_array_equal(seen[-1]['key_lengths'], lengths_s)
    np.testing.assert_allclose(got, f(masks.padding_mask(lengths_s, s)),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[2], 0.0)  # no key: zeros
  # Keys past a row's length are never read.
  changed = memory.at[:, 3:].set(normal(2, 3, 4, 12))
  moved = mha.apply(params, x, changed, mask=masks.KeyLengths(lengths_s),
                    deterministic=True)
  np.testing.assert_allclose(moved[1], got[1], rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(moved[0] - got[0])).max() > 1e-3
  assert padding.mask(4).shape == (3, 1, 1, 4)
  # A KV cache's self-attention takes masks in cache coordinates only.
  decoder = attention.MultiHeadAttention(num_heads=4, decode=True)
  cache = decoder.init(jax.random.key(0), jnp.zeros((3, 5, 16)),
                       deterministic=True)
  with raises_naming(ValueError, 'masks.KeyLengths', 'KV cache',
                     'cache coordinates'):
    decoder.apply(cache, x[:, :1], mask=padding, deterministic=True,
                  mutable=['cache'])


def test_causal_output_ignores_later_inputs():
  x = normal(0, 2, 8, 16)
  mha = attention.MultiHeadAttention(num_heads=4)
  params = init_mha(mha, x)
  t = 4
  changed = x.at[:, t + 1:].set(normal(5, 2, 8 - t - 1, 16))
  f = lambda x, causal: apply(mha, params, x, causal=causal,
                              deterministic=True)
  np.testing.assert_allclose(f(changed, True)[:, :t + 1],
                             f(x, True)[:, :t + 1], rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(f(changed, True)[:, t + 1:] -
                           f(x, True)[:, t + 1:])).max() > 1e-3
  # Without the causal mask, earlier outputs do see the change.
  assert np.abs(np.asarray(f(changed, False)[:, :t + 1] -
                           f(x, False)[:, :t + 1])).max() > 1e-3


def test_cross_attention_depends_on_queries_only_through_weights():
  decoder, encoder = normal(0, 2, 3, 16), normal(1, 2, 6, 12)
  mha = attention.MultiHeadAttention(num_heads=4)
  params = init_mha(mha, decoder, encoder)
  out, weights = apply(mha, params, decoder, encoder, deterministic=True,
                       return_weights=True)
  assert out.shape == (2, 3, 16) and weights.shape == (2, 4, 3, 6)
  # Y = (A V) W_O + b with V computed from the encoder alone.
  p = params['params']
  value = np.einsum('bsd,dnh->bsnh', encoder, p['value']['kernel']) + p[
      'value']['bias']
  heads = np.einsum('bnts,bsnh->btnh', weights, value)
  expected = np.einsum('btnh,nhd->btd', heads, p['out']['kernel']) + p['out'][
      'bias']
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  # Fix the weights (zero W_Q gives uniform weights): the decoder input then
  # has no influence at all.
  frozen = jax.tree.map(lambda a: a, params)
  frozen['params']['query'] = jax.tree.map(jnp.zeros_like, p['query'])
  other = normal(2, 2, 3, 16)
  a = apply(mha, frozen, decoder, encoder, deterministic=True)
  b = apply(mha, frozen, other, encoder, deterministic=True)
  np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(apply(mha, params, other, encoder,
                                 deterministic=True) - out)).max() > 1e-3


def test_multi_head_equals_single_heads_concatenated_and_projected():
  x = normal(0, 2, 5, 12)
  mha = attention.MultiHeadAttention(num_heads=3, head_dim=6)
  params = init_mha(mha, x)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params['params'])
  proj = lambda name, i: (x @ p[name]['kernel'][:, i] + p[name]['bias'][i])
  heads = []
  for i in range(3):  # each head: its own W_Q, W_K, W_V, then attention
    q, k, v = proj('query', i), proj('key', i), proj('value', i)
    e = np.einsum('btd,bsd->bts', q, k) / np.sqrt(6)
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    heads.append(a @ v)
  w_o = p['out']['kernel'].reshape(3 * 6, 12)  # rows: head-major concat
  expected = np.concatenate(heads, -1) @ w_o + p['out']['bias']
  np.testing.assert_allclose(apply(mha, params, x, deterministic=True),
                             expected, rtol=1e-5, atol=1e-5)


def test_grouped_query_attention():
  x = normal(0, 2, 5, 16)
  # With as many KV heads as query heads it is plain multi-head attention.
  plain = attention.MultiHeadAttention(num_heads=4)
  same = attention.MultiHeadAttention(num_heads=4, num_kv_heads=4)
  params = init_mha(plain, x)
  np.testing.assert_array_equal(apply(plain, params, x, deterministic=True),
                                apply(same, params, x, deterministic=True))
  # With K < N it equals multi-head attention whose key/value heads repeat
  # each shared head for its group of G = N / K consecutive query heads.
  grouped = attention.MultiHeadAttention(num_heads=4, num_kv_heads=2)
  gparams = init_mha(grouped, x)
  repeated = jax.tree.map(lambda a: a, gparams)
  for name in ('key', 'value'):
    for leaf in ('kernel', 'bias'):
      repeated['params'][name][leaf] = jnp.repeat(
          gparams['params'][name][leaf], 2, axis=-2)
  for impl in IMPLS:
    grouped = grouped.clone(implementation=impl)
    np.testing.assert_allclose(
        apply(grouped, gparams, x, causal=True, deterministic=True),
        apply(plain, repeated, x, causal=True, deterministic=True),
        rtol=1e-5, atol=1e-6)
  assert gparams['params']['key']['kernel'].shape == (16, 2, 4)


def test_attention_dropout_only_when_not_deterministic():
  x = normal(0, 2, 6, 16)
  mha = attention.MultiHeadAttention(num_heads=4, dropout_rate=0.5)
  params = init_mha(mha, x)
  rngs = lambda seed: {'dropout': jax.random.key(seed)}
  clean = apply(mha, params, x, deterministic=True)
  noisy = apply(mha, params, x, deterministic=False, rngs=rngs(1))
  again = apply(mha, params, x, deterministic=False, rngs=rngs(1))
  assert np.abs(np.asarray(noisy - clean)).max() > 1e-3
  np.testing.assert_array_equal(noisy, again)


def test_no_dropout_without_a_key_or_when_deterministic():
  q, k, v = normal(0, 2, 5, 4, 8), normal(1, 2, 6, 4, 8), normal(2, 2, 6, 4, 8)
  plain = attention.dot_product_attention(q, k, v, implementation='einsum')
  no_key = attention.dot_product_attention(q, k, v, implementation='einsum',
                                           dropout_rate=0.5)
  np.testing.assert_array_equal(no_key, plain)
  x = normal(3, 2, 6, 16)
  mha = attention.MultiHeadAttention(num_heads=4, dropout_rate=0.5)
  params = init_mha(mha, x)
  fused = apply(mha, params, x, deterministic=True)
  reference, _ = apply(mha, params, x, deterministic=True,
                       return_weights=True)
  np.testing.assert_allclose(fused, reference, rtol=1e-5, atol=1e-6)


def test_causal_mask_values():
  np.testing.assert_array_equal(masks.causal_mask(3),
                                np.tril(np.ones((3, 3), bool)))
  np.testing.assert_array_equal(masks.causal_mask(2, 4, offset=1),
                                np.tril(np.ones((2, 4), bool), k=1))


def test_weights_are_sown_for_plots():
  x = normal(0, 2, 5, 16)
  mha = attention.MultiHeadAttention(num_heads=4)
  params = init_mha(mha, x)
  (_, weights), state = apply(mha, params, x, causal=True,
                              deterministic=True, return_weights=True,
                              mutable=('intermediates',))
  sown = state['intermediates']['attention_weights'][0]
  np.testing.assert_array_equal(sown, weights)
  assert sown.shape == (2, 4, 5, 5)


# ----------------------------------------------------------------------------
# KV cache
# ----------------------------------------------------------------------------


def decode_in_chunks(module, params, x, chunks, **kwargs):
  """Runs `module` in decode mode over consecutive chunks of x."""
  _, cache = apply(module, params, jnp.zeros_like(x), deterministic=True,
                   mutable=('cache',), **kwargs)
  outputs, start = [], 0
  for size in chunks:
    out, cache = apply(module, {**params, **cache}, x[:, start:start + size],
                       deterministic=True, mutable=('cache',), **kwargs)
    outputs.append(out)
    start += size
  return jnp.concatenate(outputs, axis=1), cache


@pytest.mark.parametrize('chunks', [[1] * 7, [4, 1, 1, 1], [7]])
@pytest.mark.parametrize('kv_heads', [4, 1])
def test_kv_cache_decoding_equals_full_causal_pass(chunks, kv_heads):
  x = normal(0, 2, 7, 16)
  mha = attention.MultiHeadAttention(num_heads=4, num_kv_heads=kv_heads)
  params = init_mha(mha, x)
  full = apply(mha, params, x, causal=True, deterministic=True)
  stepped, cache = decode_in_chunks(mha.clone(decode=True), params, x, chunks,
                                    causal=True)
  np.testing.assert_allclose(stepped, full, rtol=1e-5, atol=1e-5)
  assert int(cache['cache']['cache_index']) == 7


def test_kv_cache_with_rotary_positions_equals_full_pass():
  x = normal(0, 2, 7, 16)
  mha = attention.MultiHeadAttention(num_heads=4, num_kv_heads=2, rotary=True)
  params = init_mha(mha, x)
  full = apply(mha, params, x, causal=True, deterministic=True)
  stepped, _ = decode_in_chunks(mha.clone(decode=True), params, x,
                                [4, 1, 1, 1], causal=True)
  np.testing.assert_allclose(stepped, full, rtol=1e-5, atol=1e-5)
  plain = apply(mha.clone(rotary=False), params, x, causal=True,
                deterministic=True)
  assert np.abs(np.asarray(plain - full)).max() > 1e-3


def test_kv_cache_overflow_is_an_error():
  x = normal(0, 1, 3, 8)
  mha = attention.MultiHeadAttention(num_heads=2, decode=True)
  params = init_mha(mha.clone(decode=False), x)
  _, cache = apply(mha, params, x, deterministic=True, mutable=('cache',))
  with raises_naming(ValueError, '4 new positions', 'cache of 3',
                     'longer sequence'):
    mha.apply({**params, **cache}, normal(1, 1, 4, 8), deterministic=True,
              mutable=['cache'])


def test_beams_read_their_examples_cached_cross_attention_keys():
  """Cross-attention keys cached for B examples serve G query rows each
  (rows b * G + g, beams), as if the keys had been tiled to B * G rows."""
  groups, memory = 3, normal(0, 2, 5, 8)
  queries = normal(1, 2 * groups, 1, 8)
  padding = jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  mha = attention.MultiHeadAttention(num_heads=2, decode=True)
  params = init_mha(mha.clone(decode=False), queries[:2], memory)

  def cached(keys_from):  # the cache-creating call, then one decode step
    _, cache = apply(mha, params, keys_from[:, :1], keys_from,
                     deterministic=True, mutable=('cache',))
    mask = padding[:, None, None, :]
    if len(keys_from) > len(memory):
      mask = jnp.repeat(mask, groups, axis=0)
    # Later calls ignore inputs_kv for the cached keys and values.
    return apply(mha, {**params, **cache}, queries, keys_from, mask=mask,
                 deterministic=True, mutable=('cache',),
                 return_weights=True)[0]

  shared, weights = cached(memory)
  tiled, tiled_weights = cached(jnp.repeat(memory, groups, axis=0))
  np.testing.assert_allclose(shared, tiled, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(weights, tiled_weights, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(weights)[:groups, :, :, 3:] == 0)  # padding

  _, cache = apply(mha, params, memory[:, :1], memory, deterministic=True,
                   mutable=('cache',))
  per_query = jnp.ones((2 * groups, 1, 1, 5), bool)
  with raises_naming(ValueError, '(6, 1, 1, 5)', 'groups of 3',
                     '[2 or 1, ..., 1, S]'):
    mha.apply({**params, **cache}, queries, memory, mask=per_query,
              deterministic=True, mutable=['cache'])


# ----------------------------------------------------------------------------
# Rotary positions
# ----------------------------------------------------------------------------


def test_rotary_embedding_is_a_complex_rotation():
  x, positions = normal(0, 2, 5, 3, 8), jnp.asarray([[0, 1, 2, 7, 30]] * 2)
  ours = np.asarray(jax.jit(positional.rotary_embedding)(x, positions))
  # Pair i = (x_i, x_{i+H/2}) as the complex number x_i + j x_{i+H/2},
  # multiplied by exp(j p theta_i), theta_i = 10000^(-2i/H).
  z = np.asarray(x[..., :4], np.float64) + 1j * np.asarray(x[..., 4:])
  theta = 10_000.0**(-np.arange(0, 8, 2) / 8)
  z = z * np.exp(1j * np.asarray(positions)[..., None, None] * theta)
  np.testing.assert_allclose(ours, np.concatenate([z.real, z.imag], -1),
                             rtol=1e-5, atol=1e-5)


def test_rotary_scores_depend_only_on_relative_position():
  q, k = normal(0, 1, 1, 1, 16), normal(1, 1, 1, 1, 16)

  @jax.jit  # one program for every pair of positions
  def dot(m, n):
    rotated_q = positional.rotary_embedding(q, jnp.asarray([m]))
    rotated_k = positional.rotary_embedding(k, jnp.asarray([n]))
    return jnp.sum(rotated_q * rotated_k)

  score = lambda m, n: float(dot(m, n))
  assert score(3, 1) == pytest.approx(score(10, 8), rel=1e-4, abs=1e-5)
  assert score(3, 1) == pytest.approx(score(102, 100), rel=1e-4, abs=1e-5)
  assert abs(score(3, 1) - score(3, 2)) > 1e-3
  with raises_naming(ValueError, 'head dim', 'even', 'got 5'):
    positional.rotary_embedding(normal(0, 1, 1, 1, 5), jnp.asarray([0]))


def test_rotary_positions_refused_in_cross_attention():
  x, z = normal(0, 1, 3, 8), normal(1, 1, 4, 8)
  mha = attention.MultiHeadAttention(num_heads=2, rotary=True)
  with raises_naming(ValueError, 'self-attention only', 'rotary=False'):
    mha.init(jax.random.key(0), x, z, deterministic=True)


# ----------------------------------------------------------------------------
# Additive attention
# ----------------------------------------------------------------------------


def test_additive_attention_matches_its_formula():
  s, h = normal(0, 2, 3, 10), normal(1, 2, 6, 8)
  mask = jnp.asarray(np.random.default_rng(2).random((2, 1, 6)) > 0.3)
  module = attention.AdditiveAttention(features=5)
  params = init(module, s, h)
  context, weights = apply(module, params, s, h, mask=mask)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params['params'])
  # e_i = v^T tanh(W_q s + W_k h_i)
  e = np.tanh((s @ p['query_projection']['kernel'] + p['query_projection'][
      'bias'])[:, :, None] + (h @ p['key_projection']['kernel'])[:, None])
  e = (e @ p['score']['kernel'])[..., 0]
  full_mask = np.broadcast_to(np.asarray(mask), e.shape)
  a = np.where(full_mask, np.exp(e - e.max(-1, keepdims=True)), 0)
  a /= a.sum(-1, keepdims=True)
  np.testing.assert_allclose(weights, a, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(context, a @ np.asarray(h), rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(weights)[~full_mask] == 0)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-6)


def test_additive_attention_is_jit_and_grad_safe_with_empty_rows():
  s, h = normal(0, 2, 1, 10), normal(1, 2, 4, 8)
  mask = jnp.asarray([[[True, True, False, False]],
                      [[False, False, False, False]]])
  module = attention.AdditiveAttention(features=5)
  params = init(module, s, h)
  loss = lambda p: module.apply(p, s, h, mask=mask)[0].sum()
  grads = jax.jit(jax.grad(loss))(params)
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  context, weights = apply(module, params, s, h, mask=mask)
  np.testing.assert_array_equal(context[1], 0)
  np.testing.assert_array_equal(weights[1], 0)
  # Projecting the keys once and attending per step gives the same result.
  projected = apply(module, params, h, method='project_keys')
  stepped, _ = apply(module, params, s, projected, h, mask=mask,
                     method='attend')
  np.testing.assert_allclose(stepped, context, rtol=1e-6)


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_clear_errors_for_bad_input():
  x = normal(0, 2, 5, 10)
  with raises_naming(ValueError, 'D=10', 'num_heads=4', 'head_dim'):
    attention.MultiHeadAttention(num_heads=4).init(
        jax.random.key(0), x, deterministic=True)
  with raises_naming(ValueError, 'num_heads=5', 'num_kv_heads=2',
                     'divisors of num_heads'):
    attention.MultiHeadAttention(num_heads=5, num_kv_heads=2).init(
        jax.random.key(0), x, deterministic=True)
  q, k = normal(0, 2, 5, 4, 8), normal(1, 2, 6, 4, 8)
  with raises_naming(ValueError, '(2, 6)', '(2, 4, 5, 6)', '[B, 1, 1, S]'):
    attention.dot_product_attention(q, k, k, mask=jnp.ones((2, 6), bool))
  with raises_naming(ValueError, 'boolean', 'float32', 'mask.astype(bool)'):
    attention.dot_product_attention(q, k, k, mask=jnp.ones((5, 6)))
  with raises_naming(ValueError, 'key (2, 6, 4, 8)', 'value (2, 7, 4, 8)'):
    attention.dot_product_attention(q, k, normal(2, 2, 7, 4, 8))
  with raises_naming(ValueError, 'N=4', 'K=3', 'multiple'):
    attention.dot_product_attention(q, normal(1, 2, 6, 3, 8),
                                    normal(2, 2, 6, 3, 8))
  with raises_naming(ValueError, "'flash'", "'auto'", "'einsum'"):
    attention.dot_product_attention(q, k, k, implementation='flash')
  with raises_naming(ValueError, 'same length S', '(2, 6, 3)', '(2, 7, 8)'):
    module = attention.AdditiveAttention(features=3)
    module.init(jax.random.key(0), x, normal(1, 2, 6, 8), normal(2, 2, 7, 8))
  with raises_naming(ValueError, '(3, 5, 5)', '(2, 2, 5, 5)',
                     '[B, 1, 1, S]'):
    attention.MultiHeadAttention(num_heads=2).init(
        jax.random.key(0), x, mask=jnp.ones((3, 5, 5), bool),
        deterministic=True)
