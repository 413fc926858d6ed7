"""Greedy and beam search: exactness, length penalty, EOS, the Transformer."""

import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import decoding
from transformer.models import encoder_decoder

EOS = 3
TABLE = 10007  # rows of the toy model's logit table (a prime, for hashing)


def penalty(length, alpha):
  """The GNMT formula, written out independently of the module."""
  return ((5.0 + length) / 6.0) ** alpha


class HashModel:
  """Toy decoder whose logits are a fixed random function of the whole prefix.

  The cache holds the inputs so far ([N, L + 1]: an example id, then each
  input token + 1, so 0 means empty), the next write position per row and a
  step counter shared by all rows (ndim 0, like a KV-cache index).
  """

  def __init__(self, vocab, max_length, seed=0, eos_bias=0.0):
    table = 2.0 * np.random.default_rng(seed).normal(size=(TABLE, vocab))
    table[:, EOS] += eos_bias  # > 0: outputs end at varied lengths
    self.table = jnp.asarray(table, jnp.float32)
    self.weights = jnp.asarray([pow(31, j, TABLE)
                                for j in range(max_length + 1)])
    self.max_length = max_length

  def cache(self, examples):
    """Initial cache of rows decoding examples [N] (ids)."""
    prefix = np.zeros((len(examples), self.max_length + 1), np.int32)
    prefix[:, 0] = 100 + np.asarray(examples)
    return dict(prefix=jnp.asarray(prefix),
                pos=jnp.ones((len(examples),), jnp.int32),
                steps=jnp.zeros((), jnp.int32))

  def step(self, tokens, cache):
    rows = jnp.arange(tokens.shape[0])
    prefix = cache['prefix'].at[rows, cache['pos']].set(tokens[:, 0] + 1)
    logits = self.table[(prefix * self.weights).sum(-1) % TABLE]
    return logits, dict(prefix=prefix, pos=cache['pos'] + 1,
                        steps=cache['steps'] + 1)


class StepModel:
  """Toy decoder whose next-token distribution depends on the step only."""

  def __init__(self, probs):
    self.logits = jnp.log(jnp.asarray(probs, jnp.float32))  # [L, V]

  def cache(self, examples):
    return jnp.zeros((len(examples),), jnp.int32)

  def step(self, tokens, cache):
    del tokens
    return self.logits[cache], cache + 1


def all_outputs(vocab, max_length):
  """[M, L]: every output ending in EOS (then pads) or at max_length."""
  words = [t for t in range(vocab) if t != EOS]
  outputs = [body + (EOS,) + (0,) * (max_length - n - 1)
             for n in range(max_length)
             for body in itertools.product(words, repeat=n)]
  outputs += itertools.product(words, repeat=max_length)
  return np.array(outputs, np.int32)


def output_lengths(seqs, eos_id=EOS):
  """[..., L] -> [...]: position of the first EOS + 1, else L."""
  seqs = np.asarray(seqs)
  has_eos = (seqs == eos_id).any(-1)
  return np.where(has_eos, (seqs == eos_id).argmax(-1) + 1, seqs.shape[-1])


def teacher_forced_log_probs(step_fn, cache, seqs):
  """[N] summed log-probabilities of outputs [N, L], up to their ends."""
  seqs = np.asarray(seqs)
  n, length = seqs.shape
  inputs = np.pad(seqs, ((0, 0), (1, 0)))[:, :-1]  # start token 0
  total, ends = np.zeros(n), output_lengths(seqs)
  for t in range(length):
    logits, cache = step_fn(jnp.asarray(inputs[:, t:t + 1]), cache)
    log_probs = np.asarray(jax.nn.log_softmax(logits), np.float64)
    total += np.where(t < ends, log_probs[np.arange(n), seqs[:, t]], 0.0)
  return total


def brute_force(model, num_examples, vocab, max_length, alpha, caps=None):
  """Per example: (outputs [M, L], scores [M]) of every allowed output."""
  outputs = all_outputs(vocab, max_length)
  examples = np.repeat(np.arange(num_examples), len(outputs))
  seqs = np.tile(outputs, (num_examples, 1))
  log_probs = teacher_forced_log_probs(model.step, model.cache(examples), seqs)
  scores = (log_probs / penalty(output_lengths(seqs), alpha)).reshape(
      num_examples, -1)
  result, lengths = [], output_lengths(outputs)
  for b in range(num_examples):
    allowed = np.ones(len(outputs), bool) if caps is None else (
        (lengths <= caps[b]) & ((outputs == EOS).any(-1) |
                                (caps[b] > max_length)))
    result.append((outputs[allowed], scores[b][allowed]))
  return result


def check_hypotheses(model, seqs, scores, alpha, caps=None):
  """Each finite-score hypothesis: pads after EOS, within caps, score right."""
  b, k, length = seqs.shape
  seqs, scores = np.asarray(seqs).reshape(b * k, length), np.asarray(scores)
  valid = np.isfinite(scores).reshape(-1)
  lengths = output_lengths(seqs)
  assert ((seqs == 0) | (np.arange(length) < lengths[:, None])).all()
  if caps is not None:
    assert (lengths <= np.repeat(caps, k))[valid].all()
  log_probs = teacher_forced_log_probs(
      model.step, model.cache(np.repeat(np.arange(b), k)), seqs)
  np.testing.assert_allclose((log_probs / penalty(lengths, alpha))[valid],
                             scores.reshape(-1)[valid], rtol=1e-5, atol=1e-5)
  assert (scores[:, :-1] >= scores[:, 1:]).all()  # best first


# ----------------------------------------------------------------------------
# Toy models
# ----------------------------------------------------------------------------


def test_beam_size_one_without_penalty_is_greedy():
  model, batch = HashModel(vocab=6, max_length=8, seed=1, eos_bias=1.0), 16
  tokens, log_probs = decoding.greedy_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      max_length=8, eos_id=EOS)
  seqs, scores = decoding.beam_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      beam_size=1, max_length=8, eos_id=EOS, alpha=0.0)
  assert len(set(output_lengths(tokens))) > 2  # ends vary: EOS matters
  np.testing.assert_array_equal(seqs[:, 0], tokens)
  np.testing.assert_allclose(scores[:, 0], log_probs, rtol=1e-6)


@pytest.mark.parametrize('alpha, caps', [
    (0.0, None), (0.6, None), (2.0, None), (0.6, (2, 3))])
def test_beam_search_finds_the_best_of_all_outputs(alpha, caps):
  vocab, length, batch = 4, 4, 2
  model = HashModel(vocab, length)
  # 3**2 live prefixes give 36 candidates at the third step: with a beam of
  # 64 nothing is pruned before the last step, where every candidate ends.
  seqs, scores = decoding.beam_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      beam_size=64, max_length=length, eos_id=EOS, alpha=alpha,
      max_lengths=None if caps is None else jnp.array(caps))
  for b, (outputs, expected) in enumerate(
      brute_force(model, batch, vocab, length, alpha, caps)):
    np.testing.assert_array_equal(seqs[b, 0], outputs[np.argmax(expected)])
    top = np.sort(expected)[::-1][:64]
    np.testing.assert_allclose(scores[b, :len(top)], top, rtol=1e-5,
                               atol=1e-5)
    assert np.isneginf(scores[b, len(top):]).all()
  check_hypotheses(model, seqs, scores, alpha, caps)


def test_length_penalty_flips_the_winner_as_the_formula_says():
  assert decoding.length_penalty(7, 2.0) == pytest.approx(penalty(7, 2.0))
  # [EOS] is likelier than any longer output, but the last step ends almost
  # surely, so [1, 1, 1, 1, 1, EOS] loses little more. With beam 2 the
  # finished set is full from the second step on: only a sound early-stopping
  # bound lets the search go on to the long winner.
  model = StepModel([[0.01, 0.5, 0.01, 0.48]] + [[0.01, 0.9, 0.01, 0.08]] * 4
                    + [[0.01, 0.01, 0.01, 0.97]])
  winners = {}
  for alpha in (0.0, 3.0):
    (outputs, expected), = brute_force(model, 1, 4, 6, alpha)
    winners[alpha] = outputs[np.argmax(expected)]
    seqs, scores = decoding.beam_search(
        model.step, model.cache([0]), batch_size=1, beam_size=2,
        max_length=6, eos_id=EOS, alpha=alpha)
    np.testing.assert_array_equal(seqs[0, 0], winners[alpha])
    np.testing.assert_allclose(scores[0, 0], expected.max(), rtol=1e-5)
  assert output_lengths(winners[0.0]) < output_lengths(winners[3.0])


def test_greedy_pads_after_eos_and_stops_at_max_lengths():
  model, batch, length = HashModel(vocab=5, max_length=8, seed=3,
                                   eos_bias=0.5), 12, 8
  search = functools.partial(decoding.greedy_search, model.step,
                             model.cache(np.arange(batch)), batch_size=batch,
                             max_length=length, eos_id=EOS)
  free, _ = search()
  free, ends = np.asarray(free), output_lengths(free)
  assert (ends < length).any() and (ends > 1).any()
  assert ((free == 0) | (np.arange(length) < ends[:, None])).all()
  assert ((free != EOS) | (np.arange(length) == ends[:, None] - 1)).all()

  caps = np.maximum(ends + np.tile([-2, -1, 0, 1, 3, -4], 2), 0)
  tokens, log_probs = search(max_lengths=jnp.array(caps))
  # A cap cuts a row whose EOS would come later; one without EOS, unless the
  # cap is beyond max_length. Caps below 1 act as 1.
  stop = np.where((free == EOS).any(-1), ends, length + 1)
  expected, cut = free.copy(), np.maximum(caps, 1) < stop
  assert cut.any() and (~cut).any()
  for b in np.flatnonzero(cut):  # the last allowed token is a forced EOS
    cap = max(caps[b], 1)
    expected[b, cap - 1], expected[b, cap:] = EOS, 0
  np.testing.assert_array_equal(tokens, expected)
  np.testing.assert_allclose(log_probs, teacher_forced_log_probs(
      model.step, model.cache(np.arange(batch)), expected), rtol=1e-5)


def test_searches_under_jit_with_static_max_length():
  model, batch = HashModel(vocab=5, max_length=6, seed=2, eos_bias=0.5), 3
  caps = jnp.array([2, 6, 4])

  @functools.partial(jax.jit, static_argnames='max_length')
  def run(cache, caps, max_length):
    kwargs = dict(batch_size=batch, max_length=max_length, eos_id=EOS,
                  max_lengths=caps)
    return (decoding.greedy_search(model.step, cache, **kwargs),
            decoding.beam_search(model.step, cache, beam_size=3, **kwargs))

  kwargs = dict(batch_size=batch, max_length=6, eos_id=EOS, max_lengths=caps)
  cache = model.cache(np.arange(batch))
  greedy, beam = run(cache, caps, max_length=6)
  np.testing.assert_array_equal(
      greedy[0], decoding.greedy_search(model.step, cache, **kwargs)[0])
  np.testing.assert_array_equal(beam[0], decoding.beam_search(
      model.step, cache, beam_size=3, **kwargs)[0])
  greedy, beam = run(cache, caps, max_length=3)  # a new static length
  assert greedy[0].shape == (batch, 3) and beam[0].shape == (batch, 3, 3)


# ----------------------------------------------------------------------------
# The Transformer with its KV cache
# ----------------------------------------------------------------------------

MAX_LEN = 16


@pytest.fixture(scope='module')
def transformer():
  """Tiny random model, jitted full forward pass and the greedy reference."""
  # Untied, shrunken embeddings: with tied ones a random model mostly repeats
  # its input token, which would hide a cache that forgets the history.
  config = encoder_decoder.config_for('tiny', vocab_size=11,
                                      max_length=MAX_LEN, dropout_rate=0.0,
                                      tie_embeddings=False)
  model = encoder_decoder.Transformer(config)
  inputs = jnp.array([[3, 5, 7, 2, 9, 4, 0], [8, 1, 6, 0, 0, 0, 0]])
  params = nn.unbox(jax.jit(functools.partial(
      model.init, jax.random.key(0), deterministic=True))(inputs, inputs))
  params = dict(params['params'])
  params['embed'] = jax.tree.map(lambda e: 0.3 * e, params['embed'])
  full = jax.jit(lambda x, y: model.apply({'params': params}, x, y,
                                          deterministic=True))

  def reference_greedy(eos_id):
    """Argmax of the full teacher-forced pass on the prefix, per step."""
    tokens = np.zeros((2, MAX_LEN), np.int32)
    total, done = np.zeros(2), np.zeros(2, bool)
    for i in range(MAX_LEN):  # causal: position i sees tokens[:, :i] only
      log_probs = np.asarray(jax.nn.log_softmax(full(inputs, tokens)[:, i]))
      token = np.where(done, 0, log_probs.argmax(-1))
      total += np.where(done, 0.0, log_probs[[0, 1], token])
      tokens[:, i], done = token, done | (token == eos_id)
    return tokens, total

  # An EOS the model emits early in row 1, so that rows end at different steps.
  eos_id = int(reference_greedy(-1)[0][1, 3])
  return dict(model=model, params=params, inputs=inputs, full=full,
              eos_id=eos_id, greedy=reference_greedy(eos_id))


def transformer_search(t, search, **kwargs):
  """Runs `search` under jit on a KV cache made from the encoder outputs."""
  model, inputs = t['model'], t['inputs']
  decoder = encoder_decoder.Transformer(model.config.replace(decode=True))
  rows = len(inputs) * kwargs.get('beam_size', 1)

  @jax.jit
  def run(params):
    encoded = model.apply({'params': params}, inputs, deterministic=True,
                          method='encode')
    _, variables = decoder.apply(
        {'params': params}, encoded, inputs,
        jnp.zeros((len(inputs), MAX_LEN), jnp.int32), deterministic=True, method='decode', mutable=['cache'])
    tiled = jnp.repeat(inputs, rows // len(inputs), axis=0)
    # Cross-attention reads the keys/values cached from `encoded` above; the
    # encoder outputs later calls pass are ignored, so a stand-in will do.
    stand_in = jnp.zeros((rows, 1, model.config.d_model))

    def step_fn(tokens, cache):
      logits, variables = decoder.apply(
          {'params': params, 'cache': cache}, stand_in, tiled, tokens,
          deterministic=True, method='decode', mutable=['cache'])
      return logits[:, -1], variables['cache']

    return search(step_fn, variables['cache'], batch_size=len(inputs),
                  max_length=MAX_LEN, eos_id=t['eos_id'], **kwargs)

  return run(t['params'])


def test_transformer_greedy_with_kv_cache_equals_full_forward(transformer):
  tokens, log_probs = transformer_search(transformer, decoding.greedy_search)
  expected, expected_log_probs = transformer['greedy']
  np.testing.assert_array_equal(tokens, expected)
  np.testing.assert_allclose(log_probs, expected_log_probs, rtol=1e-4)


def test_transformer_beam_size_one_without_penalty_is_greedy(transformer):
  seqs, scores = transformer_search(transformer, decoding.beam_search,
                                    beam_size=1, alpha=0.0)
  expected, expected_log_probs = transformer['greedy']
  np.testing.assert_array_equal(seqs[:, 0], expected)
  np.testing.assert_allclose(scores[:, 0], expected_log_probs, rtol=1e-4)


def test_transformer_beam_scores_equal_full_forward_rescoring(transformer):
  beam, alpha = 3, 0.6
  seqs, scores = transformer_search(transformer, decoding.beam_search,
                                    beam_size=beam, alpha=alpha)
  seqs = np.asarray(seqs)
  assert all(len({tuple(s) for s in example}) == beam for example in seqs)
  seqs = seqs.reshape(-1, MAX_LEN)
  logits = transformer['full'](jnp.repeat(transformer['inputs'], beam, 0),
                               jnp.asarray(seqs))
  log_probs = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)),
                                 seqs[..., None], -1)[..., 0]
  ends = output_lengths(seqs, transformer['eos_id'])
  expected = np.where(np.arange(MAX_LEN) < ends[:, None], log_probs, 0).sum(
      -1) / penalty(ends, alpha)
  np.testing.assert_allclose(np.asarray(scores).reshape(-1), expected,
                             rtol=1e-4, atol=1e-5)

