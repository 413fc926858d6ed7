"""The convolutional encoder-decoder (ConvS2S): its receptive field checked
through gradients (output t does not depend on input t - k beyond L (k - 1)
positions, in the encoder both ways and in the decoder only backwards),
padding that changes nothing, step-by-step decoding equal to teacher
forcing and the one attention hook (a translation run with beam search:
e2e/test_convs2s_e2e.py)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import conftest
from transformer import layers
from transformer.models import convs2s


def tiny_config(**overrides):
  return convs2s.config_for('tiny', vocab_size=30, max_length=40,
                            dropout_rate=0.0, **overrides)


# Tracing and compiling dominate these tests, not arithmetic: each
# configuration is initialised once per process (tests only read the
# parameters; arrays are immutable), and `init`, `apply` and the Jacobians
# run compiled (from the persistent cache, faster than eager calls).
@functools.lru_cache(maxsize=None)
def setup_config(config):
  model = convs2s.ConvS2S(config)
  rng = np.random.default_rng(0)
  inputs = jnp.asarray(rng.integers(1, 30, (2, 24)))
  targets = jnp.asarray(rng.integers(1, 30, (2, 24)))
  init = jax.jit(functools.partial(model.init, deterministic=True))
  params = nn.unbox(init(jax.random.key(0), inputs, targets))['params']
  return config, model, params, inputs, targets


def setup(**overrides):
  return setup_config(tiny_config(**overrides))


apply = conftest.jit_apply()


def reach(jacobian: np.ndarray, position: int) -> tuple[int, int]:
  """The first and last input positions (axis 0 of `jacobian`, the
  gradient of one output with respect to every input) that output
  `position` depends on, relative to it."""
  strength = np.abs(jacobian).reshape(len(jacobian), -1).sum(1)
  nonzero = np.flatnonzero(strength > 0)
  return nonzero.min() - position, nonzero.max() - position


@pytest.mark.parametrize('num_layers,kernel_size', [(2, 3), (3, 5)])
def test_receptive_fields_are_layers_times_kernel(num_layers, kernel_size):
  config, model, params, inputs, targets = setup(num_layers=num_layers,
                                                 kernel_size=kernel_size)
  embedded = apply(model, {'params': params}, inputs,
                   method=lambda m, t: m._embed(t, m.source_positions))
  half = num_layers * (kernel_size - 1) // 2
  t = 12

  def encoder_out(e):
    return model.apply({'params': params}, inputs, e, deterministic=True,
                       method=lambda m, i, e, **kw: m.encoder(i, e, **kw)
                       )['keys'][0, t]

  jac = jax.jit(jax.jacobian(encoder_out))(embedded)
  jac = np.asarray(jac)[:, 0]  # [E, S, E]
  assert reach(jac.transpose(1, 0, 2), t) == (-half, half)
  assert half * 2 + 1 == config.receptive_field
  # The decoder is causal: output t reads targets t - L (k - 1) .. t only
  # (its input at t is the target before it, shifted right).
  memory = apply(model, {'params': params}, inputs, deterministic=True,
                 method='encode')
  g = apply(model, {'params': params}, targets,
            method=lambda m, t: m._embed(t, m.target_positions))

  def decoder_out(g):
    return model.apply({'params': params}, g, memory, deterministic=True,
                       method=lambda m, g, mem, **kw: m.decoder(g, mem, **kw)
                       )[0, t]

  jac = np.asarray(jax.jit(jax.jacobian(decoder_out))(g))[:, 0]
  assert reach(jac.transpose(1, 0, 2), t) == (-config.receptive_field + 1, 0)


def test_padding_changes_nothing_and_step_decoding_is_teacher_forcing():
  config, model, params, inputs, targets = setup()
  short = inputs[:, :10]
  padded = jnp.pad(short, ((0, 0), (0, 6)))
  f = lambda x: apply(model, {'params': params}, x, targets[:, :8],
                      deterministic=True)
  np.testing.assert_allclose(f(padded), f(short), rtol=1e-5, atol=1e-5)
  full, state = apply(model, {'params': params}, inputs, targets,
                      deterministic=True, mutable=('intermediates',))
  weights = layers.attention_weights(state['intermediates'])
  assert sorted(weights) == [f'decoder/layer_{i}/cross_attention'
                             for i in range(config.num_layers)]
  np.testing.assert_allclose(
      weights['decoder/layer_0/cross_attention'].sum(-1), 1.0, rtol=1e-5)
  decoding = jax.jit(convs2s.init_decoding, static_argnums=(0, 3))(
      model, params, inputs, 24)
  previous, outputs = jnp.zeros((2, 1), jnp.int32), []
  step = jax.jit(lambda tokens, s: convs2s.decoding_step(model, params,
                                                         tokens, s))
  for t in range(targets.shape[1]):
    logits, decoding = step(previous, decoding)
    outputs.append(logits)
    previous = targets[:, t:t + 1]
  np.testing.assert_allclose(jnp.stack(outputs, 1), full, rtol=1e-4,
                             atol=1e-5)


def test_param_count_is_the_built_models_count():
  config = tiny_config(num_layers=3)
  init = functools.partial(convs2s.ConvS2S(config).init, deterministic=True)
  tokens = jax.ShapeDtypeStruct((2, 24), jnp.int32)
  # The built model's shapes suffice: traced, not run.
  params = jax.eval_shape(init, jax.random.key(0), tokens, tokens)['params']
  count = sum(x.size for x in jax.tree.leaves(nn.unbox(params)))
  assert convs2s.param_count(config) == count
  assert convs2s.param_count(config.replace(num_layers=2)) < count
