"""The decoder-only language model (GPT)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import conftest
from transformer import layers
from transformer.models import decoder


@pytest.mark.parametrize('size,expected', [
    ('gpt2', 124_439_808), ('gpt2-medium', 354_823_168),
    ('gpt2-large', 774_030_080), ('gpt2-xl', 1_557_611_200)])
def test_gpt2_parameter_counts_equal_the_reference(size, expected):
  assert decoder.param_count(decoder.config_for(size)) == expected


def test_mpt_1b_shape_counts_its_closed_form():
  # 24 blocks of 12 d^2 weights (no biases) and two LayerNorms (scale and
  # bias), tied embeddings, learned positions for 2,048, a final LayerNorm.
  d, layers_, vocab, context = 2_048, 24, 50_432, 2_048
  expected = layers_ * (12 * d * d + 4 * d) + (vocab + context) * d + 2 * d
  assert decoder.param_count(decoder.config_for('mpt-1b')) == expected
  assert expected == 1_315_639_296


TOKENS = np.random.default_rng(0).integers(1, 17, (2, 10))


# Tracing and compiling dominate these tests, not arithmetic: each
# configuration is initialised once per process (tests only read the
# parameters; arrays are immutable), and `init` and `apply` run compiled:
# from the persistent cache that costs half an eager call, and calls of the
# same shapes (the decoding steps) reuse the program.
@functools.lru_cache(maxsize=None)
def initialised(config):
  """(model, parameters) of a configuration."""
  model = decoder.Decoder(config)
  init = jax.jit(functools.partial(model.init, deterministic=True))
  return model, nn.unbox(init(jax.random.key(0), jnp.asarray(TOKENS)))


apply = conftest.jit_apply()


def setup(**overrides):
  config = decoder.config_for('tiny', vocab_size=17, max_length=16,
                              dropout_rate=0.0, **overrides)
  return (config, *initialised(config), jnp.asarray(TOKENS))


POSITIONS = pytest.mark.parametrize('positions', ['learned', 'rotary'])


@POSITIONS
def test_logits_at_t_ignore_later_tokens(positions):
  _, model, params, tokens = setup(positional_encoding=positions)
  changed = tokens.at[:, 6:].set(3)
  f = lambda t: apply(model, params, t, deterministic=True)
  np.testing.assert_allclose(f(changed)[:, :6], f(tokens)[:, :6], rtol=1e-5,
                             atol=1e-6)
  assert np.abs(np.asarray(f(changed)[:, 6:] - f(tokens)[:, 6:])).max() > 1e-3


@POSITIONS
def test_packed_documents_do_not_see_each_other(positions):
  _, model, params, tokens = setup(positional_encoding=positions)
  first, second = tokens[0, :4], tokens[0, 4:9]
  row = jnp.concatenate([first, second, jnp.zeros(1, jnp.int32)])[None]
  segments = jnp.asarray([[1] * 4 + [2] * 5 + [0]])
  positions = jnp.asarray([list(range(4)) + list(range(5)) + [0]])
  packed = apply(model, params, row, positions=positions,
                 segmentation=segments, deterministic=True)
  for doc, start in ((first, 0), (second, 4)):
    alone = apply(model, params, doc[None], deterministic=True)
    np.testing.assert_allclose(packed[0, start:start + len(doc)], alone[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('size,expected', [
    ('llama2-7b', 6_738_415_616), ('llama2-13b', 13_015_864_320),
    ('llama2-70b', 68_976_648_192)])
def test_llama2_parameter_counts_equal_the_reference(size, expected):
  assert decoder.param_count(decoder.config_for(size)) == expected


# LLaMA's block: RMSNorm, SwiGLU, rotary positions, grouped-query attention,
# no biases and an untied output layer.
LLAMA_BLOCK = dict(norm='rms', activation='swiglu', use_bias=False,
                   tie_embeddings=False, norm_position='pre')


def test_llama_blocks_hold_what_the_options_say():
  _, _, params, _ = setup(positional_encoding='rotary', num_kv_heads=2,
                          **LLAMA_BLOCK)
  p = params['params']
  block = p['blocks']['layer_0']
  assert set(block['attention_sublayer']['norm']) == {'scale'}  # no bias
  assert set(block['mlp']) == {'wi', 'wi_linear', 'wo'}
  assert block['mlp']['wi']['kernel'].shape == (32, 128)
  assert 'bias' not in block['mlp']['wo']
  assert p['lm_head']['kernel'].shape == (32, 17)
  assert 'positions' not in p  # rotary: no table


def test_rms_norm_and_swiglu_compute_their_formulas():
  config = decoder.config_for('tiny', norm='rms', activation='swiglu')
  x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 32)), jnp.float32)
  norm = layers.layer_norm(config)
  scale = jnp.linspace(0.5, 2, 32)
  out = norm.apply({'params': {'scale': scale}}, x)
  expected = x / np.sqrt(np.mean(np.square(x), -1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(out, expected * scale, rtol=1e-5, atol=1e-6)
  ffn = layers.FeedForward(64, 'swiglu', use_bias=False)
  params = nn.unbox(ffn.init(jax.random.key(0), x))['params']
  w1, w3, w2 = (params[k]['kernel'] for k in ('wi', 'wi_linear', 'wo'))
  np.testing.assert_allclose(
      ffn.apply({'params': params}, x),
      (jax.nn.silu(x @ w1) * (x @ w3)) @ w2, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="norm='batch'"):
    decoder.config_for('tiny', norm='batch')


@pytest.mark.parametrize('kv_heads,positions,options', [
    (4, 'learned', {}), (1, 'learned', {}), (2, 'rotary', {}),
    (2, 'rotary', LLAMA_BLOCK)])
def test_cached_decoding_equals_full_forward(kv_heads, positions, options):
  config, model, params, tokens = setup(num_kv_heads=kv_heads,
                                        positional_encoding=positions,
                                        **options)
  full = apply(model, params, tokens, deterministic=True)
  cached = decoder.build(config, decode=True)
  _, cache = apply(cached, params, jnp.zeros((2, 16), jnp.int32),
                   deterministic=True, mutable=('cache',))
  # A prompt of 4 tokens at once, then one token per call.
  outputs, start = [], 0
  for size in (4, 1, 1, 1, 1, 1, 1):
    logits, cache = apply(cached, {**params, **cache},
                          tokens[:, start:start + size],
                          deterministic=True, mutable=('cache',))
    outputs.append(logits)
    start += size
  np.testing.assert_allclose(jnp.concatenate(outputs, 1), full, rtol=1e-4,
                             atol=1e-5)


def test_rotary_positions_learn_no_table_and_see_only_offsets():
  _, model, params, tokens = setup(positional_encoding='rotary')
  learned = setup()[2]
  count = lambda p: sum(x.size for x in jax.tree.leaves(p))
  assert count(learned) - count(params) == 16 * 32  # the position table
  # Shifting every position by the same amount changes nothing.
  f = lambda offset: apply(
      model, params, tokens, positions=jnp.arange(10)[None] + offset,
      deterministic=True)
  np.testing.assert_allclose(f(5), f(0), rtol=1e-4, atol=1e-5)
  # ...but the order of the tokens still matters.
  swapped = apply(model, params, tokens[:, ::-1], deterministic=True)
  assert np.abs(np.asarray(swapped[:, -1] - f(0)[:, -1])).max() > 1e-3


@POSITIONS
def test_left_padded_prompt_equals_the_unpadded_prompt(positions):
  """What batched generation relies on: left padding hidden by key_mask and
  positions counted from the first real token change nothing."""
  _, model, params, tokens = setup(positional_encoding=positions)
  prompt = tokens[:1, :5]
  padded = jnp.concatenate([jnp.zeros((1, 3), jnp.int32), prompt], 1)
  logits = apply(model, params, padded,
                 positions=jnp.maximum(jnp.arange(8) - 3, 0)[None],
                 key_mask=padded > 0, deterministic=True)
  alone = apply(model, params, prompt, deterministic=True)
  np.testing.assert_allclose(logits[:, 3:], alone, rtol=1e-5, atol=1e-5)
