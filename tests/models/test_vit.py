"""The Vision Transformer model."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import layers
from transformer.models import vit


@pytest.mark.parametrize('name,expected', [
    ('Ti/16', 5_717_416), ('S/16', 22_050_664), ('B/16', 86_567_656),
    ('B/32', 88_224_232), ('L/16', 304_326_632), ('H/16', 632_199_400)])
def test_parameter_counts_equal_the_reference(name, expected):
  assert vit.param_count(vit.config_for(name)) == expected


@pytest.mark.parametrize('name', ['Ti/16', 'S/32', 'B/16', 'L/14', 'H/14'])
def test_shapes_for_each_size(name):
  # Two of the size's blocks: depth changes no shape, and tracing all 32
  # of H/14's costs seconds (its parameter count is checked above).
  config = vit.config_for(name, num_classes=10, num_layers=2)
  images = jax.ShapeDtypeStruct((2, 224, 224, 3), jnp.float32)
  model = vit.VisionTransformer(config)
  variables = jax.eval_shape(lambda x: model.init(
      jax.random.key(0), x, deterministic=True), images)
  # One pass gives the logits and what `encode` returns within it.
  logits, state = jax.eval_shape(lambda v, x: model.apply(
      v, x, deterministic=True,
      capture_intermediates=lambda module, method: method == 'encode'),
                                 variables, images)
  (states,) = state['intermediates']['encode']
  assert logits.shape == (2, 10)
  assert states.shape == (2, (224 // config.patch_size)**2 + 1,
                          config.d_model)


def test_patchify_round_trip_and_patch_contents():
  images = jnp.asarray(np.random.default_rng(0).normal(size=(2, 12, 8, 3)))
  patches = vit.patchify(images, 4)
  assert patches.shape == (2, 3, 2, 48)
  # Patch (1, 1) is the 4x4 block at rows 4..7, columns 4..7.
  np.testing.assert_array_equal(patches[1, 1, 1].reshape(4, 4, 3),
                                images[1, 4:8, 4:8])
  np.testing.assert_array_equal(vit.unpatchify(patches, 4, 3), images)


def tiny_config(**overrides):
  return vit.config_for('mu/4', image_size=16, num_classes=5, **overrides)


IMAGES = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype(
    np.float32)


# Tracing and compiling dominate these tests, not arithmetic: each tiny
# configuration is initialised once per process (tests only read the
# parameters; arrays are immutable). Eager calls here cost no more than
# compiled ones: they reuse the programs of the initialisation's shapes.
@functools.lru_cache(maxsize=None)
def initialised(config):
  """(model, parameters) of a configuration."""
  model = vit.VisionTransformer(config)
  return model, nn.unbox(model.init(jax.random.key(0), jnp.asarray(IMAGES),
                                    deterministic=True))


def tiny(**overrides):
  config = tiny_config(**overrides)
  return (config, *initialised(config), jnp.asarray(IMAGES))


def test_dense_patch_embedding_is_the_strided_convolution():
  _, conv_model, conv_params, images = tiny()
  dense_model = vit.VisionTransformer(tiny_config(patch_embedding='dense'))
  params = jax.tree.map(lambda x: x, conv_params)
  kernel = params['params']['embedding']['kernel']  # [P, P, C, D]
  params['params']['embedding']['kernel'] = kernel.reshape(-1,
                                                           kernel.shape[-1])
  np.testing.assert_allclose(
      dense_model.apply(params, images, deterministic=True, method='encode'),
      conv_model.apply(conv_params, images, deterministic=True,
                       method='encode'), rtol=1e-5, atol=1e-5)


def test_head_starts_at_zero_and_pooling_options():
  _, model, params, images = tiny()
  np.testing.assert_array_equal(model.apply(params, images,
                                            deterministic=True), 0.0)
  for overrides in (dict(pooling='gap'), dict(positional_encoding='sincos2d'),
                    dict(pooling='gap', positional_encoding='sincos2d')):
    config, model, params, images = tiny(**overrides)
    states = model.apply(params, images, deterministic=True, method='encode')
    assert states.shape == (2, config.num_tokens, 32)
    assert ('pos_embedding' in params['params']) == (
        config.positional_encoding == 'learned')
    assert ('cls' in params['params']) == (config.pooling == 'token')


@pytest.mark.parametrize('pooling', ['token', 'gap'])
def test_padded_token_sequence_changes_no_state(pooling):
  """pad_tokens_to (for cuDNN, which refuses odd lengths): the padded keys
  are never read and the padding is dropped again."""
  config, model, params, images = tiny(pooling=pooling)
  padded = vit.VisionTransformer(config.replace(pad_tokens_to=5))
  plain = model.apply(params, images, deterministic=True, method='encode')
  assert config.num_tokens % 5  # 17 or 16 tokens, padded to 20
  got = padded.apply(params, images, deterministic=True, method='encode')
  assert got.shape == plain.shape
  np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
  # The head reads the same states (zero-started head: perturb it).
  head = jax.tree.map(lambda p: p + 0.1, params)
  np.testing.assert_allclose(padded.apply(head, images, deterministic=True),
                             model.apply(head, images, deterministic=True),
                             rtol=1e-5, atol=1e-5)
  # Weights kept for figures are the real tokens' (the run is unpadded).
  _, kept = padded.apply(params, images, deterministic=True,
                         mutable=['intermediates'])
  for weights in layers.attention_weights(kept['intermediates']).values():
    assert weights.shape[-2:] == (config.num_tokens, config.num_tokens)
  with raises_naming(ValueError, 'pad_tokens_to=0', '>= 1'):
    config.replace(pad_tokens_to=0)


def test_patches_are_positioned():
  """Without positions the encoder would be permutation equivariant over
  patches; with them, swapping two patches changes the class token."""
  _, model, params, images = tiny()
  patches = vit.patchify(images, 4)
  swapped = patches.at[:, 0, 0].set(patches[:, 3, 3]).at[:, 3, 3].set(
      patches[:, 0, 0])
  encode = lambda x: model.apply(params, x, deterministic=True,
                                 method='encode')[:, 0]
  changed = encode(vit.unpatchify(swapped, 4, 3))
  assert np.abs(np.asarray(changed - encode(images))).max() > 1e-4


def test_position_interpolation_keeps_the_grid_and_is_bilinear():
  rng = np.random.default_rng(0)
  embedding = jnp.asarray(rng.normal(size=(1, 1 + 16, 8)), jnp.float32)
  same = vit.resize_position_embedding(embedding, 4, has_class_token=True)
  np.testing.assert_array_equal(same, embedding)
  # A field linear in the row and column is reproduced exactly inside the
  # grid (pixel centres: new coordinate u maps to (u + 0.5) * 4/8 - 0.5).
  rows, cols = np.meshgrid(np.arange(4.0), np.arange(4.0), indexing='ij')
  linear = np.stack([rows, cols, 2 * rows - cols], -1).reshape(1, 16, 3)
  resized = vit.resize_position_embedding(jnp.asarray(linear, jnp.float32),
                                          8, has_class_token=False)
  resized = np.asarray(resized).reshape(8, 8, 3)
  u = (np.arange(8) + 0.5) * 0.5 - 0.5
  inner = slice(1, 7)  # away from the clamped border
  np.testing.assert_allclose(resized[inner, inner, 0],
                             np.broadcast_to(u[inner, None], (6, 6)),
                             atol=1e-5)
  np.testing.assert_allclose(resized[inner, inner, 1],
                             np.broadcast_to(u[None, inner], (6, 6)),
                             atol=1e-5)
  with_token = vit.resize_position_embedding(embedding, 6,
                                             has_class_token=True)
  assert with_token.shape == (1, 37, 8)
  np.testing.assert_array_equal(with_token[:, 0], embedding[:, 0])


def test_clear_errors():
  with raises_naming(ValueError, "'B16'", 'VARIANT/PATCH', '"B/16"'):
    vit.config_for('B16')
  with raises_naming(ValueError, 'image_size=100', 'patch_size=16',
                     'resize'):
    vit.config_for('B/16', image_size=100)
  with raises_naming(ValueError, "positional_encoding='sinusoidal'",
                     "'sincos2d'"):
    vit.config_for('B/16', positional_encoding='sinusoidal')
  _, model, params, _ = tiny()
  with raises_naming(ValueError, '(1, 32, 32, 3)', '[B, 16, 16, 3]',
                     'image_size/num_channels'):
    model.apply(params, jnp.zeros((1, 32, 32, 3)), deterministic=True)


def test_attention_rollout():
  _, model, params, images = tiny()
  _, state = model.apply(params, images, deterministic=True,
                         mutable=['intermediates'])
  found = layers.attention_weights(state['intermediates'])
  assert list(found) == ['encoder/layer_0/self_attention',
                         'encoder/layer_1/self_attention']
  weights = list(found.values())
  assert weights[0].shape == (2, 2, 17, 17)
  np.testing.assert_allclose(weights[0].sum(-1), 1.0, rtol=1e-5)
  rollout = vit.attention_rollout(weights)
  np.testing.assert_allclose(rollout.sum(-1), 1.0, rtol=1e-5)
  # By hand: (0.5 A2 + 0.5 I)(0.5 A1 + 0.5 I), heads averaged.
  mix = lambda a: 0.5 * a.mean(1) + 0.5 * jnp.eye(17)
  np.testing.assert_allclose(rollout, mix(weights[1]) @ mix(weights[0]),
                             rtol=1e-5, atol=1e-6)
  # Attention that only looks at itself leaves the identity.
  identity = [jnp.broadcast_to(jnp.eye(5), (1, 3, 5, 5))] * 3
  np.testing.assert_allclose(vit.attention_rollout(identity)[0], np.eye(5),
                             atol=1e-6)
