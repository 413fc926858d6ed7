"""Embeddings, positional encodings, feed-forward, LayerNorm and blocks."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import layers
from transformer.core import positional

CONFIG = layers.TransformerConfig(num_layers=2, d_model=16, num_heads=4,
                                  d_ff=24, dropout_rate=0.0)


def normal(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape),
                     jnp.float32)


def init(module, *args, **kwargs):
  return nn.unbox(module.init(jax.random.key(0), *args, **kwargs))


def randomize(params, seed=0):
  """Replaces every parameter (LayerNorm's ones and zeros too) by noise."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [
      a + 0.3 * jax.random.normal(k, a.shape) for a, k in zip(leaves, keys)])


# ----------------------------------------------------------------------------
# Positional encodings
# ----------------------------------------------------------------------------


def test_sinusoidal_encoding_matches_formula():
  table = positional.sinusoidal_encoding(50, 16)
  for pos in (0, 1, 7, 49):
    for i in range(8):
      angle = pos / 10000**(2 * i / 16)
      assert table[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
      assert table[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)


def test_concatenated_sinusoids_hold_the_same_values_as_sin_then_cos():
  # Marian's layout: PE(pos, i) = sin(pos / 10000^(2i/D)), PE(pos, D/2 + i)
  # = cos(same), i < D/2.
  interleaved = positional.sinusoidal_encoding(50, 16)
  concatenated = positional.sinusoidal_encoding(50, 16, layout='concatenated')
  np.testing.assert_array_equal(concatenated[:, :8], interleaved[:, 0::2])
  np.testing.assert_array_equal(concatenated[:, 8:], interleaved[:, 1::2])
  np.testing.assert_allclose(concatenated[7, 3], np.sin(7 / 1e4**(6 / 16)),
                             rtol=1e-6)
  with raises_naming(ValueError, "layout='blocked'", "'concatenated'"):
    positional.sinusoidal_encoding(4, 8, layout='blocked')
  with raises_naming(ValueError, "sinusoidal_layout='blocked'",
                     "'interleaved'"):
    layers.TransformerConfig(sinusoidal_layout='blocked')


def test_sinusoidal_encoding_is_bounded_and_distinct_per_position():
  length = 2048
  table = positional.sinusoidal_encoding(length, 64).astype(np.float64)
  assert np.abs(table).max() <= 1.0
  squared = (table**2).sum(-1)
  distances = squared[:, None] + squared[None, :] - 2 * table @ table.T
  np.fill_diagonal(distances, np.inf)
  assert distances.min() > 1e-3  # no two positions share an encoding


def test_positional_encoding_modes_and_errors():
  x = normal(0, 2, 5, 16)
  sinusoidal = positional.PositionalEncoding(max_length=8)
  np.testing.assert_allclose(sinusoidal.apply({}, x),
                             x + positional.sinusoidal_encoding(8, 16)[:5])
  learned = positional.PositionalEncoding(max_length=8, kind='learned')
  params = init(learned, x)
  table = params['params']['embedding']
  assert table.shape == (8, 16)
  positions = jnp.asarray([[3, 2, 1, 0, 7]] * 2)
  np.testing.assert_allclose(
      learned.apply(params, x, positions=positions), x + table[positions])
  with raises_naming(ValueError, 'length 9', 'max_length=8',
                     'raise max_length'):
    sinusoidal.apply({}, normal(0, 1, 9, 16))
  with raises_naming(ValueError, 'features', 'even', 'got 7'):
    positional.sinusoidal_encoding(4, 7)


# ----------------------------------------------------------------------------
# Embedding, feed-forward, LayerNorm
# ----------------------------------------------------------------------------


def test_token_embedding_scale_and_tied_softmax():
  tokens = jnp.asarray([[1, 4, 2]])
  embed = layers.TokenEmbedding(vocab_size=10, features=16)
  params = init(embed, tokens)
  table = params['params']['embed']['embedding']
  np.testing.assert_allclose(embed.apply(params, tokens),
                             table[tokens] * 4.0, rtol=1e-6)
  unscaled = layers.TokenEmbedding(10, 16, scale_by_sqrt_dim=False)
  np.testing.assert_allclose(unscaled.apply(params, tokens), table[tokens])
  x = normal(1, 1, 3, 16)
  np.testing.assert_allclose(embed.apply(params, x, method='attend'),
                             x @ table.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('activation,fn', [('relu', jax.nn.relu),
                                           ('gelu', jax.nn.gelu)])
def test_feed_forward_matches_formula(activation, fn):
  x = normal(0, 2, 3, 16)
  ffn = layers.FeedForward(64, activation)
  params = randomize(init(ffn, x))
  p = params['params']
  expected = fn(x @ p['wi']['kernel'] + p['wi']['bias']) @ p['wo'][
      'kernel'] + p['wo']['bias']
  np.testing.assert_allclose(ffn.apply(params, x), expected, rtol=1e-5,
                             atol=1e-5)
  assert layers.TransformerConfig(d_model=16, num_heads=4).mlp_dim == 64


def test_layer_norm_matches_formula():
  x = normal(0, 2, 3, 16) * 3 + 1
  norm = layers.layer_norm(CONFIG)
  params = randomize(init(norm, x))
  gamma, beta = params['params']['scale'], params['params']['bias']
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  expected = gamma * (x - mean) / np.sqrt(var + 1e-6) + beta
  np.testing.assert_allclose(norm.apply(params, x), expected, rtol=1e-5,
                             atol=1e-5)


# ----------------------------------------------------------------------------
# Blocks
# ----------------------------------------------------------------------------


def manual_encoder_block(config, params, x):
  """The block written out from its sublayers' own modules."""
  attention = layers._attention(config, 'self_attention')
  ffn = layers._feed_forward(config)
  norm = layers.layer_norm(config)
  attend = lambda h: attention.apply({'params': params['self_attention']}, h,
                                     deterministic=True)
  mlp = lambda h: ffn.apply({'params': params['mlp']}, h)
  ln = lambda name, h: norm.apply({'params': params[name]['norm']}, h)
  if config.norm_position == 'post':  # LN(x + f(x))
    x = ln('attention_sublayer', x + attend(x))
    return ln('mlp_sublayer', x + mlp(x))
  x = x + attend(ln('attention_sublayer', x))  # x + f(LN(x))
  return x + mlp(ln('mlp_sublayer', x))


@pytest.mark.parametrize('norm_position', ['post', 'pre'])
def test_encoder_block_residual_order(norm_position):
  config = CONFIG.replace(norm_position=norm_position)
  x = normal(0, 2, 5, 16)
  block = layers.SelfAttentionBlock(config)
  params = randomize(init(block, x, deterministic=True))
  out = block.apply(params, x, deterministic=True)
  np.testing.assert_allclose(out, manual_encoder_block(config,
                                                       params['params'], x),
                             rtol=1e-5, atol=1e-5)


def test_post_and_pre_ln_blocks_differ_as_specified():
  x = normal(0, 2, 5, 16) * 5 + 2
  post = layers.SelfAttentionBlock(CONFIG)
  pre = layers.SelfAttentionBlock(CONFIG.replace(norm_position='pre'))
  params = init(post, x, deterministic=True)  # LN at init: scale 1, bias 0
  post_out = post.apply(params, x, deterministic=True)
  pre_out = pre.apply(params, x, deterministic=True)
  # Post-LN ends in a LayerNorm: every position has mean 0 and variance 1.
  np.testing.assert_allclose(post_out.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(post_out.var(-1), 1.0, rtol=1e-3)
  # Pre-LN keeps the residual stream un-normalised: the input's scale and
  # offset pass through the identity path.
  assert np.abs(np.asarray(pre_out.mean(-1))).mean() > 0.5
  assert np.asarray(pre_out.var(-1)).mean() > 5.0
  # And with zero sublayer outputs a pre-LN block is the identity.
  zero_out = jax.tree.map(lambda a: a, params)
  for name in ('self_attention', 'mlp'):
    sub = zero_out['params'][name]
    last = 'out' if name == 'self_attention' else 'wo'
    sub[last] = jax.tree.map(jnp.zeros_like, sub[last])
  np.testing.assert_allclose(pre.apply(zero_out, x, deterministic=True), x,
                             rtol=1e-6)


def test_stacks_have_n_layers_and_final_norm_only_for_pre_ln():
  x, enc = normal(0, 2, 5, 16), normal(1, 2, 4, 16)
  for norm_position, has_final in (('post', False), ('pre', True)):
    config = CONFIG.replace(norm_position=norm_position, num_layers=3)
    enc_params = init(layers.SelfAttentionStack(config), x, deterministic=True)
    dec_params = init(layers.CrossAttentionStack(config), x, enc,
                      deterministic=True)
    for p in (enc_params['params'], dec_params['params']):
      assert sorted(k for k in p if k.startswith('layer_')) == [
          'layer_0', 'layer_1', 'layer_2']
      assert ('final_norm' in p) == has_final
    assert 'cross_attention' in dec_params['params']['layer_0']


def test_residual_dropout_only_when_not_deterministic():
  config = CONFIG.replace(dropout_rate=0.3)
  x = normal(0, 2, 5, 16)
  block = layers.SelfAttentionBlock(config)
  params = init(block, x, deterministic=True)
  clean = block.apply(params, x, deterministic=True)
  np.testing.assert_array_equal(
      clean,
      layers.SelfAttentionBlock(CONFIG).apply(params, x, deterministic=True))
  noisy = block.apply(params, x, deterministic=False,
                      rngs={'dropout': jax.random.key(1)})
  assert np.abs(np.asarray(noisy - clean)).max() > 1e-2


def test_decoder_block_is_causal_and_uses_cross_mask():
  y, enc = normal(0, 2, 6, 16), normal(1, 2, 4, 16)
  block = layers.CrossAttentionBlock(CONFIG)
  params = randomize(init(block, y, enc, deterministic=True))
  f = lambda y, enc, mask=None: block.apply(params, y, enc, cross_mask=mask,
                                            deterministic=True)
  changed = y.at[:, 3:].set(0.0)
  np.testing.assert_allclose(f(changed, enc)[:, :3], f(y, enc)[:, :3],
                             rtol=1e-5, atol=1e-6)
  # Source positions masked out by cross_mask have no influence.
  mask = jnp.asarray([True, True, False, False])[None, None, None, :]
  other = enc.at[:, 2:].set(normal(2, 2, 2, 16))
  np.testing.assert_allclose(f(y, other, mask), f(y, enc, mask), rtol=1e-5,
                             atol=1e-6)
  assert np.abs(np.asarray(f(y, other) - f(y, enc))).max() > 1e-3


# ----------------------------------------------------------------------------
# Incremental decoding through whole stacks
# ----------------------------------------------------------------------------


class TinyDecoder(nn.Module):
  """Embedding + positions + decoder stack (or causal encoder stack = GPT)."""
  config: layers.TransformerConfig
  cross: bool

  @nn.compact
  def __call__(self, tokens, encoded, *, deterministic):
    x = layers.TokenEmbedding(20, self.config.d_model)(tokens)
    x = positional.PositionalEncoding(16, decode=self.config.decode)(x)
    if self.cross:
      return layers.CrossAttentionStack(self.config)(x, encoded,
                                              deterministic=deterministic)
    return layers.SelfAttentionStack(self.config)(x, causal=True,
                                            deterministic=deterministic)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=('deterministic', 'mutable'))
def jitted_apply(module, variables, *args, **kwargs):
  """`module.apply` as one program, as decoding runs a stack: eagerly each
  of its operations compiles on its own. `mutable` a tuple (static)."""
  return module.apply(variables, *args, **kwargs)


@functools.lru_cache  # both chunkings decode the same model
def stack_model(cross):
  """(config, model, randomised parameters, tokens, encoder outputs)."""
  config = CONFIG.replace(num_kv_heads=2, norm_position='pre')
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 20, (2, 6)))
  encoded = normal(1, 2, 5, 16)
  model = TinyDecoder(config, cross)
  params = randomize(init(model, tokens, encoded, deterministic=True))
  return config, model, params, tokens, encoded


@pytest.mark.parametrize('cross', [True, False])
@pytest.mark.parametrize('chunks', [[1] * 6, [3, 1, 1, 1]])
def test_stack_kv_cache_decoding_equals_full_forward(cross, chunks):
  config, model, params, tokens, encoded = stack_model(cross)
  full = jitted_apply(model, params, tokens, encoded, deterministic=True)
  decoder = TinyDecoder(config.replace(decode=True), cross)
  # The cache-creating call sees the real encoder outputs (cross K/V).
  _, cache = jitted_apply(decoder, params, jnp.zeros_like(tokens), encoded,
                          deterministic=True, mutable=('cache',))
  outputs, start = [], 0
  for size in chunks:
    # Later calls get a different `encoded`: the cached projections win.
    out, cache = jitted_apply(decoder, {**params, **cache},
                              tokens[:, start:start + size], encoded * 0,
                              deterministic=True, mutable=('cache',))
    outputs.append(out)
    start += size
  np.testing.assert_allclose(jnp.concatenate(outputs, 1), full, rtol=1e-5,
                             atol=1e-5)


# ----------------------------------------------------------------------------
# Logical axes and configuration errors
# ----------------------------------------------------------------------------


def test_every_parameter_has_logical_axis_names():
  y, enc = jnp.zeros((2, 6, 16)), jnp.zeros((2, 4, 16))
  config = CONFIG.replace(norm_position='pre')
  variables = layers.CrossAttentionStack(config).init(jax.random.key(0), y, enc,
                                               deterministic=True)
  boxed = jax.tree.leaves(variables, is_leaf=lambda x: isinstance(
      x, nn.LogicallyPartitioned))
  assert boxed and all(isinstance(b, nn.LogicallyPartitioned) for b in boxed)
  specs = nn.get_partition_spec(variables)['params']['layer_0']
  assert tuple(specs['self_attention']['query']['kernel']) == (
      'embed', 'heads', 'kv')
  assert tuple(specs['cross_attention']['out']['kernel']) == (
      'heads', 'kv', 'embed')
  assert tuple(specs['mlp']['wi']['kernel']) == ('embed', 'mlp')
  assert tuple(specs['mlp']['wo']['kernel']) == ('mlp', 'embed')
  assert tuple(specs['mlp_sublayer']['norm']['scale']) == ('embed',)
  embed = layers.TokenEmbedding(10, 16).init(jax.random.key(0),
                                             jnp.zeros((1, 2), jnp.int32))
  assert tuple(nn.get_partition_spec(embed)['params']['embed'][
      'embedding']) == ('vocab', 'embed')


def test_config_errors_name_the_problem():
  with raises_naming(ValueError, 'd_model=10', 'num_heads=4', 'head_dim'):
    layers.TransformerConfig(d_model=10, num_heads=4)
  with raises_naming(ValueError, 'num_heads=8', 'num_kv_heads=3',
                     '[1, 2, 4, 8]') as refused:
    layers.TransformerConfig(num_heads=8, num_kv_heads=3)
  # Each value the refusal proposes is accepted.
  proposed = str(refused.value).split('one of [')[1].split(']')[0]
  for value in proposed.split(', '):
    layers.TransformerConfig(d_model=16, num_heads=8, num_kv_heads=int(value))
  with raises_naming(ValueError, "norm_position='sandwich'", "'pre'"):
    layers.TransformerConfig(norm_position='sandwich')
  with raises_naming(ValueError, "activation='tanh'", "'gelu'"):
    layers.TransformerConfig(activation='tanh')
  with raises_naming(ValueError, "attention_implementation='flash'",
                     "'auto'"):
    layers.TransformerConfig(attention_implementation='flash')
