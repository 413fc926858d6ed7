"""The RNN encoder-decoder with and without attention."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
import conftest
from transformer import decoding
from transformer import layers
from transformer.models import rnn

VARIANTS = ('none', 'additive', 'dot')


# Tracing and compiling dominate these tests, not arithmetic: each model
# and what tests share of its outputs is built once per process (tests only
# read them; arrays are immutable), and what runs again is compiled.
# Two layers everywhere: the stacking is always exercised and one model of
# each variant and direction serves every test.
@functools.lru_cache(maxsize=None)
def setup_model(variant, bidirectional=True):
  config = rnn.config_for('tiny', vocab_size=13, attention=variant,
                          dropout_rate=0.0, bidirectional=bidirectional,
                          num_layers=2)
  model = rnn.Seq2Seq(config)
  rng = np.random.default_rng(0)
  inputs = jnp.asarray(rng.integers(3, 13, (3, 7)), jnp.int32)
  inputs = inputs.at[1, 4:].set(0).at[2, 2:].set(0)  # padded sources
  targets = jnp.asarray(rng.integers(3, 13, (3, 5)), jnp.int32)
  # Random parameters, much noisier than the initialisation, so that every
  # path matters; drawn for the shapes `init` gives (traced, not run: an
  # eager `init` costs a second, mostly compiling its scans).
  init = functools.partial(model.init, jax.random.key(0), deterministic=True)
  shapes = jax.eval_shape(init, inputs, targets)['params']
  noise = np.random.default_rng(1)
  params = jax.tree.map(
      lambda x: jnp.asarray(noise.normal(0.0, 0.5, x.shape), x.dtype), shapes)
  return model, params, inputs, targets


# `model.apply`, compiled: from the persistent cache a compiled call costs
# less than an eager one, and decoding calls it once per token.
apply = conftest.jit_apply()
decoding_step = jax.jit(rnn.decoding_step, static_argnums=0)
init_decoding = jax.jit(rnn.init_decoding, static_argnums=(0, 3))


@functools.lru_cache(maxsize=None)
def teacher_forced(variant, bidirectional=True):
  """(logits, state with the 'intermediates') of the teacher-forced pass."""
  model, params, inputs, targets = setup_model(variant, bidirectional)
  return apply(model, {'params': params}, inputs, targets, deterministic=True,
               mutable=('intermediates',))


@functools.lru_cache(maxsize=None)
def decoding_state(variant):
  """`rnn.init_decoding` of the bidirectional model's inputs."""
  model, params, inputs, _ = setup_model(variant)
  return init_decoding(model, params, inputs, 6)


@pytest.mark.parametrize('variant', VARIANTS)
@pytest.mark.parametrize('bidirectional', [True, False])
def test_shapes_and_padded_sources_get_zero_weight(variant, bidirectional):
  model, params, inputs, targets = setup_model(variant, bidirectional)
  logits, state = teacher_forced(variant, bidirectional)
  assert logits.shape == (3, 5, 13)
  found = layers.attention_weights(state.get('intermediates', {}))
  if variant == 'none':  # no attention, no weights to plot
    assert not found
    return
  assert list(found) == ['attention']  # the alignment only, [B, 1, T, S]
  weights = np.asarray(found['attention'][:, 0])
  assert weights.shape == (3, 5, 7)
  pad = np.asarray(inputs == 0)
  assert np.all(weights[np.broadcast_to(pad[:, None], weights.shape)] == 0)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
  # Padding does not change the result for the real tokens.
  short = apply(model, {'params': params}, inputs[2:, :2], targets[2:],
                deterministic=True)
  np.testing.assert_allclose(short[0], logits[2], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('variant', VARIANTS)
def test_step_by_step_decoding_equals_teacher_forcing(variant):
  model, params, _, targets = setup_model(variant)
  full, _ = teacher_forced(variant)
  state = decoding_state(variant)  # max_length is unused: no capacity
  previous = jnp.zeros((3, 1), jnp.int32)  # the start symbol
  for t in range(targets.shape[1]):
    logits, state = decoding_step(model, params, previous, state)
    np.testing.assert_allclose(logits, full[:, t], rtol=1e-4, atol=1e-5)
    previous = targets[:, t:t + 1]


@pytest.mark.parametrize('variant', VARIANTS)
def test_attention_gradient_reaches_every_encoder_state(variant):
  model, params, inputs, _ = setup_model(variant)
  state = decoding_state(variant)  # what `Seq2Seq.encode` returns
  memory, carry = state['memory'].tree, state['carry']
  embedded = jnp.ones((3, model.config.embed_dim))

  def first_output(values):
    step = lambda module: module.step(carry, embedded,
                                      {**memory, 'values': values},
                                      deterministic=True)
    _, (output, _) = nn.apply(step, model)({'params': params})
    return output.sum()

  grads = jax.jit(jax.grad(first_output))(memory['values'])
  grads = np.abs(np.asarray(grads)).sum(-1)
  real = np.asarray(inputs > 0)
  if variant == 'none':  # the bottleneck: only h_T reaches the decoder
    np.testing.assert_array_equal(grads, 0.0)
  else:
    assert np.all(grads[real] > 0)
    np.testing.assert_array_equal(grads[~real], 0.0)


@pytest.mark.parametrize('variant', VARIANTS)
def test_beam_one_equals_greedy(variant):
  model, params, _, _ = setup_model(variant)
  state = decoding_state(variant)
  step_fn = functools.partial(rnn.decoding_step, model, params)
  greedy, _ = decoding.greedy_search(step_fn, state, batch_size=3,
                                     max_length=6, eos_id=1)
  beam, _ = decoding.beam_search(step_fn, state, batch_size=3, beam_size=1,
                                 max_length=6, eos_id=1, alpha=0.0)
  np.testing.assert_array_equal(beam[:, 0], greedy)


@pytest.mark.parametrize('variant', VARIANTS)
def test_beams_share_the_encoder_memory_without_changing_results(variant):
  """The memory stays one row per example (`PerExample`): each example's
  beams attend to it as a group of queries, which must give exactly what a
  copy of the memory in every beam gives."""
  model, params, _, _ = setup_model(variant)
  state = decoding_state(variant)
  memory_rows = []

  def shared(tokens, state):
    memory_rows.append(state['memory'].tree['values'].shape[0])
    return rnn.decoding_step(model, params, tokens, state)

  def tiled(tokens, state):  # the memory as a plain, per-beam leaf
    logits, new = rnn.decoding_step(
        model, params, tokens,
        {**state, 'memory': decoding.PerExample(state['memory'])})
    return logits, {**new, 'memory': new['memory'].tree}

  search = functools.partial(decoding.beam_search, batch_size=3, beam_size=4,
                             max_length=6, eos_id=1, alpha=0.6)
  seqs, scores = search(shared, state)
  expected_seqs, expected_scores = search(
      tiled, {**state, 'memory': state['memory'].tree})
  assert set(memory_rows) == {3}
  assert len({tuple(row) for row in np.asarray(seqs).reshape(-1, 6)}) > 3
  np.testing.assert_array_equal(seqs, expected_seqs)
  np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)
  four_rows = jax.tree.map(lambda x: jnp.concatenate([x, x[:1]]),
                           state['carry'])
  with raises_naming(ValueError, '4 decoder rows', '3 encoded examples',
                     'beams of each example'):
    rnn.decoding_step(model, params, jnp.zeros((4, 1), jnp.int32),
                      {**state, 'carry': four_rows})


def test_config_errors():
  with raises_naming(ValueError, "attention='multiplicative'", "'additive'"):
    rnn.config_for('tiny', attention='multiplicative')
  with raises_naming(ValueError, "RNN size 'huge'", "'rnnsearch'"):
    rnn.config_for('huge')


@pytest.mark.parametrize('variant', VARIANTS)
def test_param_count_is_the_built_models_count(variant):
  model, params, _, _ = setup_model(variant)
  count = sum(x.size for x in jax.tree.leaves(params))
  assert rnn.param_count(model.config) == count
