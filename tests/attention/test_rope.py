"""Rotary frequencies: the base (theta) and the scalings 'linear',
'dynamic' (dynamic NTK) and 'llama3' against their formulas in float64
(against transformers' own: tests/interop/test_rope_reference.py); the
model config's rope_* fields reach the attention, and bad ones are refused
by name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import attention
from transformer import configs
from transformer import layers
from transformer.core import positional
from transformer.tasks import language_modeling

HEAD_DIM = 16
# Llama 3.1's band settings at a context of 32: with head dim 16 and base
# 10,000 the wavelengths 2 pi 10000^(2i/16) are 6.3 (below 32 / 4: kept),
# 19.9 (between: blended), then 62.8 and longer (above 32 / 1: scaled).
LLAMA3 = positional.Rope(scaling='llama3', factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_positions=32)


def frequencies(rope, positions=None):
  return np.asarray(positional.rotary_frequencies(rope, HEAD_DIM, positions))


def geometric(theta):
  """theta^(-2i/H), float64."""
  return theta**(-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)


def normal(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape),
                     jnp.float32)


@pytest.mark.parametrize('theta', [10_000.0, 500_000.0, 100.0])
def test_theta_is_the_base_of_the_geometric_frequencies(theta):
  np.testing.assert_allclose(frequencies(positional.Rope(theta=theta)),
                             geometric(theta), rtol=1e-6)


def test_default_frequencies_are_the_papers_rotation():
  x, positions = normal(0, 2, 5, 3, HEAD_DIM), jnp.arange(5)
  np.testing.assert_array_equal(
      positional.rotary_embedding(x, positions),
      positional.rotary_embedding(
          x, positions, positional.rotary_frequencies(positional.Rope(),
                                                      HEAD_DIM)))


def test_linear_scaling_rotates_by_positions_divided_by_the_factor():
  x, positions = normal(0, 2, 7, 3, HEAD_DIM), jnp.arange(7) * 9
  linear = positional.Rope(scaling='linear', factor=4.0)
  ours = positional.rotary_embedding(
      x, positions, positional.rotary_frequencies(linear, HEAD_DIM))
  expected = positional.rotary_embedding(x, positions / 4.0)
  np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
  assert np.abs(np.asarray(ours - positional.rotary_embedding(
      x, positions))).max() > 0.1  # the factor matters


def dynamic_ntk(theta, factor, length, context):
  """The dynamic NTK base for a sequence of `length`, float64."""
  length = max(length, context)
  return theta * (factor * length / context - (factor - 1))**(
      HEAD_DIM / (HEAD_DIM - 2))


@pytest.mark.parametrize('length', [5, 16, 17, 40, 1_000])
def test_dynamic_ntk_grows_the_base_with_the_longest_position(length):
  dynamic = positional.Rope(scaling='dynamic', factor=2.0,
                            original_max_positions=16)
  # Any positions whose maximum is length - 1 (packed rows restart).
  positions = jnp.asarray([[0, 1, length - 1], [3, 0, 2]])
  ours = frequencies(dynamic, positions)
  np.testing.assert_allclose(
      ours, geometric(dynamic_ntk(10_000.0, 2.0, length, 16)), rtol=2e-6)
  if length <= 16:  # within the original context: the plain frequencies
    np.testing.assert_allclose(ours, geometric(10_000.0), rtol=1e-6)
  else:
    assert (ours[1:] < geometric(10_000.0)[1:] * (1 - 1e-3)).all()


def test_dynamic_ntk_under_jit_follows_each_calls_positions():
  dynamic = positional.Rope(scaling='dynamic', factor=2.0,
                            original_max_positions=16)
  jitted = jax.jit(lambda p: positional.rotary_frequencies(dynamic,
                                                           HEAD_DIM, p))
  for length in (8, 30, 64):
    np.testing.assert_allclose(
        jitted(jnp.arange(length)),
        geometric(dynamic_ntk(10_000.0, 2.0, length, 16)), rtol=2e-6)
  with raises_naming(ValueError, "rope_scaling='dynamic'",
                     'pass the positions'):
    positional.rotary_frequencies(dynamic, HEAD_DIM)
  with raises_naming(ValueError, "rope_scaling='dynamic'",
                     'head dim above 2', 'got 2'):
    positional.rotary_frequencies(dynamic, 2, jnp.arange(3))


def test_llama3_keeps_high_frequencies_scales_low_ones_and_blends_between():
  plain, ours = geometric(10_000.0), frequencies(LLAMA3)
  wavelength = 2 * np.pi / plain
  high, low = wavelength < 32 / 4, wavelength > 32 / 1
  between = ~high & ~low
  assert high.sum() == 1 and between.sum() == 1 and low.sum() == 6
  np.testing.assert_allclose(ours[high], plain[high], rtol=1e-6)
  np.testing.assert_allclose(ours[low], plain[low] / 8, rtol=1e-6)
  smooth = (32 / wavelength[between] - 1) / (4 - 1)
  np.testing.assert_allclose(
      ours[between], (1 - smooth) * plain[between] / 8
      + smooth * plain[between], rtol=1e-6)
  assert (plain[between] / 8 < ours[between]).all() and (
      ours[between] < plain[between]).all()


@pytest.mark.parametrize('fields,named', [
    (dict(rope_scaling='yarn'), ("rope_scaling='yarn'", "'llama3'")),
    (dict(rope_theta=0.0), ('rope_theta=0.0', '> 0')),
    (dict(rope_scaling='linear', rope_factor=0.0),
     ('rope_factor=0.0', '> 0')),
    (dict(rope_scaling='linear', rope_factor=-2.0),
     ('rope_factor=-2.0', '> 0')),
    (dict(rope_factor=4.0), ('rope_factor=4.0', "rope_scaling=''")),
    (dict(rope_scaling='linear', rope_factor=2.0,
          rope_original_max_positions=8),
     ('rope_original_max_positions=8', "rope_scaling='linear'")),
    (dict(rope_scaling='dynamic', rope_factor=2.0, rope_low_freq_factor=2.0),
     ('rope_low_freq_factor=2.0', "rope_scaling='dynamic'")),
    (dict(rope_scaling='dynamic', rope_factor=2.0),
     ("rope_scaling='dynamic'", 'rope_original_max_positions', 'got None')),
    (dict(rope_scaling='llama3', rope_factor=8.0,
          rope_original_max_positions=32, rope_low_freq_factor=4.0),
     ('rope_low_freq_factor=4.0', 'rope_high_freq_factor=4.0',
      '0 < low < high')),
])
def test_bad_rope_settings_are_refused_naming_the_field(fields, named):
  with raises_naming(ValueError, *named):
    layers.TransformerConfig(positional_encoding='rotary', **fields)


def test_rope_settings_without_rotary_positions_are_refused():
  with raises_naming(ValueError, 'rope_*', "positional_encoding='learned'",
                     "positional_encoding='rotary'"):
    layers.TransformerConfig(positional_encoding='learned',
                             rope_theta=500_000.0)


def test_the_configs_rope_reaches_the_attention():
  """The block stack's self-attention equals a MultiHeadAttention given
  the same `Rope`, and differs from the default rotation."""
  config = layers.TransformerConfig(
      num_layers=1, d_model=32, num_heads=2, d_ff=48, dropout_rate=0.0,
      positional_encoding='rotary', **{
          'rope_theta': 500_000.0, 'rope_scaling': 'llama3',
          'rope_factor': 8.0, 'rope_original_max_positions': 32})
  assert config.rope == positional.Rope(500_000.0, 'llama3', 8.0, 1.0, 4.0,
                                        32)
  built = layers._attention(config, 'self_attention')  # pylint: disable=protected-access
  assert built.rope == config.rope and built.rotary
  x = normal(1, 2, 40, 32)
  params = built.init(jax.random.key(0), x, deterministic=True)
  ours = built.apply(params, x, causal=True, deterministic=True)
  same = attention.MultiHeadAttention(
      num_heads=2, use_bias=True, rotary=True, rope=config.rope).apply(
          params, x, causal=True, deterministic=True)
  default = built.clone(rope=positional.Rope()).apply(
      params, x, causal=True, deterministic=True)
  np.testing.assert_array_equal(ours, same)
  assert np.abs(np.asarray(ours - default)).max() > 1e-3


def test_rope_fields_are_config_fields():
  """The rope_* fields are flat scalars of the model section: set on the
  command line, they reach the model; a model's values write back."""
  config = configs.override(
      configs.load_experiment('experiments/lm_offline.py:model=llama,'
                              'runlocal'),
      "model.rope_theta=500000.0,model.rope_scaling='llama3',"
      'model.rope_factor=8.0,model.rope_original_max_positions=64')
  model = language_modeling.model_config(config, vocab_size=200)
  assert model.rope == positional.Rope(500_000.0, 'llama3', 8.0, 1.0, 4.0,
                                       64)
  values = configs.model_values(model, config.model)
  assert {k: v for k, v in values.items() if k.startswith('rope_')} == dict(
      rope_theta=500_000.0, rope_scaling='llama3', rope_factor=8.0,
      rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
      rope_original_max_positions=64)
