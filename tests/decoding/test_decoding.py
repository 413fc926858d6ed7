"""Greedy and beam search, sampling: exactness, length penalty, filters, EOS,
the Transformer and the GPT with their KV caches."""

import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import decoding
from transformer.models import decoder
from transformer.models import encoder_decoder

EOS = 3
TABLE = 10007  # rows of the toy model's logit table (a prime, for hashing)

# The searches under jit, as the commands run them. Eagerly each operation
# of a search's set-up (and of a teacher-forced step) compiles on its own,
# per shape: most of these tests' time. Under jit a search is one program,
# shared by the tests that search the same model (`hash_model` makes each
# once) with the same static arguments; alpha, temperature and top_p are
# traced, as the commands pass them. Two tests check that eager searches
# give the same: the one under jit with a static max_length and the one of
# a seed's samples.
greedy_search = jax.jit(decoding.greedy_search, static_argnames=(
    'step_fn', 'batch_size', 'max_length', 'eos_id'))
beam_search = jax.jit(decoding.beam_search, static_argnames=(
    'step_fn', 'batch_size', 'beam_size', 'max_length', 'eos_id'))
sample = jax.jit(decoding.sample, static_argnames=(
    'step_fn', 'batch_size', 'max_new_tokens', 'eos_id', 'top_k', 'greedy'))
# Filtering with Python numbers, as eagerly (traced ones: test_top_p_...).
filter_logits = jax.jit(decoding.filter_logits,
                        static_argnames=('temperature', 'top_k', 'top_p'))


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


@functools.lru_cache
def hash_model(vocab, max_length, seed=0, eos_bias=0.0):
  """A `HashModel`, made once per process and arguments: its step function
  is a static argument of the jitted searches, so tests that share it
  share their compiled searches."""
  return HashModel(vocab, max_length, seed, eos_bias)


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
  """[M, L]: every output ending in EOS (then pads) or at max_length;
  padding (0) is never an output token."""
  words = [t for t in range(vocab) if t not in (EOS, 0)]
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


@functools.partial(jax.jit, static_argnums=0)
def forced_step(step_fn, tokens, cache):
  """One teacher-forced step: (log-probabilities, cache), one program."""
  logits, cache = step_fn(tokens, cache)
  return jax.nn.log_softmax(logits), cache


def teacher_forced_log_probs(step_fn, cache, seqs):
  """[N] summed log-probabilities of outputs [N, L], up to their ends."""
  seqs = np.asarray(seqs)
  n, length = seqs.shape
  inputs = np.pad(seqs, ((0, 0), (1, 0)))[:, :-1]  # start token 0
  total, ends = np.zeros(n), output_lengths(seqs)
  for t in range(length):
    log_probs, cache = forced_step(step_fn, inputs[:, t:t + 1], cache)
    log_probs = np.asarray(log_probs, np.float64)
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
  model, batch = hash_model(vocab=6, max_length=8, seed=1, eos_bias=1.0), 16
  tokens, log_probs = greedy_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      max_length=8, eos_id=EOS)
  seqs, scores = beam_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      beam_size=1, max_length=8, eos_id=EOS, alpha=0.0)
  assert len(set(output_lengths(tokens))) > 2  # ends vary: EOS matters
  np.testing.assert_array_equal(seqs[:, 0], tokens)
  np.testing.assert_allclose(scores[:, 0], log_probs, rtol=1e-6)


@pytest.mark.parametrize('alpha, caps', [
    (0.0, None), (0.6, None), (2.0, None), (0.6, (2, 3))])
def test_beam_search_finds_the_best_of_all_outputs(alpha, caps):
  vocab, length, batch = 4, 4, 2
  model = hash_model(vocab, length)
  # 3**2 live prefixes give 36 candidates at the third step: with a beam of
  # 64 nothing is pruned before the last step, where every candidate ends.
  seqs, scores = beam_search(
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
    seqs, scores = beam_search(
        model.step, model.cache([0]), batch_size=1, beam_size=2,
        max_length=6, eos_id=EOS, alpha=alpha)
    np.testing.assert_array_equal(seqs[0, 0], winners[alpha])
    np.testing.assert_allclose(scores[0, 0], expected.max(), rtol=1e-5)
  assert output_lengths(winners[0.0]) < output_lengths(winners[3.0])


def test_greedy_pads_after_eos_and_stops_at_max_lengths():
  model, batch, length = hash_model(vocab=5, max_length=8, seed=3,
                                    eos_bias=0.5), 12, 8
  search = functools.partial(greedy_search, model.step,
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
      # Position i picked out in NumPy: a jax slice at each constant i
      # would compile a program of its own.
      log_probs = np.asarray(jax.nn.log_softmax(
          np.asarray(full(inputs, tokens))[:, i]))
      token = np.where(done, 0, log_probs.argmax(-1))
      total += np.where(done, 0.0, log_probs[[0, 1], token])
      tokens[:, i], done = token, done | (token == eos_id)
    return tokens, total

  # An EOS the model emits early in row 1, so that rows end at different steps.
  eos_id = int(reference_greedy(-1)[0][1, 3])
  return dict(model=model, params=params, inputs=inputs, full=full,
              eos_id=eos_id, greedy=reference_greedy(eos_id), searches={})


def transformer_search(t, search, **kwargs):
  """Runs `search` under jit on a KV cache made from the encoder outputs;
  once per search and arguments (several tests compare with the same)."""
  key = (search.__name__, tuple(sorted(kwargs.items())))
  if key not in t['searches']:
    t['searches'][key] = _transformer_search(t, search, **kwargs)
  return t['searches'][key]


def _transformer_search(t, search, **kwargs):
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



@pytest.mark.parametrize('track_beams', [False, True])
def test_beams_share_the_cross_attention_cache_without_changing_results(
    transformer, track_beams):
  """The family's decoding state keeps the encoder side `PerExample` (one
  row per example, never tiled or reordered), and with `beam_size` the
  self-attention keys/values in their slots (`PerSlot`, never reordered);
  beam search over it gives what tiling and reordering everything gives."""
  beam, alpha = 3, 0.6
  model, inputs, params = (transformer[k] for k in ('model', 'inputs',
                                                     'params'))
  decoder = encoder_decoder.build(model.config, decode=True)
  seen = []

  def step_fn(tokens, state):
    seen.append(jax.tree.map(jnp.shape, state))
    return encoder_decoder.decoding_step(decoder, params, tokens, state)

  @jax.jit
  def run():
    state = encoder_decoder.init_decoding(decoder, params, inputs, MAX_LEN,
                                          beam if track_beams else 1)
    return decoding.beam_search(
        step_fn, state, batch_size=len(inputs), beam_size=beam,
        max_length=MAX_LEN, eos_id=transformer['eos_id'], alpha=alpha)

  seqs, scores = run()
  shapes = lambda tree: [x for x in jax.tree.leaves(
      tree, is_leaf=lambda x: isinstance(x, tuple)) if x]  # not scalars
  shared, per_step = shapes(seen[-1]['shared']), shapes(seen[-1]['cache'])
  assert {x[0] for x in shared} == {len(inputs)}
  assert {x[0] for x in per_step} == {len(inputs) * beam}
  in_slots = shapes(seen[-1]['slots'])  # the layers' keys and values
  layers = transformer['model'].config.num_layers
  assert len(in_slots) == (2 * layers if track_beams else 0), in_slots
  assert {x[0] for x in in_slots} <= {len(inputs) * beam}
  expected_seqs, expected_scores = transformer_search(
      transformer, decoding.beam_search, beam_size=beam, alpha=alpha)
  np.testing.assert_array_equal(seqs, expected_seqs)
  np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)



def test_state_kept_in_slots_for_another_beam_size_is_refused(transformer):
  """Slots group rows by the beam size they were built for: beam search of
  another size, greedy search and sampling of a state built for beams would
  read other examples' history (or do K times the work)."""
  model, inputs, params = (transformer[k] for k in ('model', 'inputs',
                                                     'params'))
  decoder = encoder_decoder.build(model.config, decode=True)
  # Under jit: eagerly each operation of the encoder and the cache-creating
  # call compiles on its own (a second).
  state = jax.jit(encoder_decoder.init_decoding, static_argnums=(0, 3, 4))(
      decoder, params, inputs, MAX_LEN, 3)
  assert state['slots'].beam_size == 3
  step_fn = functools.partial(encoder_decoder.decoding_step, decoder, params)
  search = functools.partial(decoding.beam_search, step_fn, state,
                             batch_size=len(inputs), max_length=MAX_LEN,
                             eos_id=transformer['eos_id'])
  with raises_naming(ValueError, 'beam search of 3', 'not 2',
                     'beam_size=2'):
    search(beam_size=2)
  with raises_naming(ValueError, 'beam search of 3', 'not 1',
                     'beam_size=1'):
    decoding.greedy_search(step_fn, state, batch_size=len(inputs),
                           max_length=MAX_LEN, eos_id=transformer['eos_id'])
  with raises_naming(ValueError, 'beam search of 3', 'beam_size=1'):
    decoding.sample(step_fn, state, rng=jax.random.key(0),
                    batch_size=len(inputs), max_new_tokens=3, eos_id=1,
                    prompt_last=jnp.zeros((len(inputs),), jnp.int32))


# ----------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------

# A hand-made distribution, shuffled so that sorting matters: descending it is
# 0.5 (token 1), 0.3 (token 3), 0.15 (token 0), 0.05 (token 2).
PROBS = np.array([0.15, 0.5, 0.05, 0.3])


def kept(logits):
  """Token ids of the finite entries of a [1, V] filtered row."""
  return set(np.flatnonzero(np.isfinite(np.asarray(logits)[0])))


@pytest.mark.parametrize('top_p, expected', [
    (0.0, {1}), (0.5, {1}), (0.8, {1, 3}), (0.81, {0, 1, 3}),
    (0.95, {0, 1, 3}), (0.96, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, expected):
  logits = jnp.log(jnp.asarray(PROBS, jnp.float32))[None]
  filtered = decoding.filter_logits(logits, top_p=top_p)
  assert kept(filtered) == expected
  np.testing.assert_array_equal(filtered[0, list(expected)],
                                logits[0, list(expected)])
  # Traced top_p and temperature (which scales the kept logits) under jit.
  jitted = jax.jit(decoding.filter_logits, static_argnames='top_k')(
      logits, top_p=jnp.float32(top_p), temperature=jnp.float32(1.0))
  np.testing.assert_array_equal(jitted, filtered)


def test_top_k_then_top_p_of_the_renormalised_rest():
  logits = jnp.log(jnp.asarray(PROBS, jnp.float32))[None]
  assert kept(filter_logits(logits, top_k=2)) == {1, 3}
  # Alone, 0.84 needs 3 tokens (0.5 + 0.3 < 0.84); of the top 3, renormalised
  # by 0.95, the first two reach it.
  assert kept(filter_logits(logits, top_p=0.84)) == {0, 1, 3}
  assert kept(filter_logits(logits, top_k=3, top_p=0.84)) == {1, 3}
  # Exactly k survive ties, the lower ids first.
  ties = jnp.array([[1.0, 2.0, 2.0, 0.0]])
  assert kept(filter_logits(ties, top_k=1)) == {1}
  assert kept(filter_logits(ties, top_k=2)) == {1, 2}
  np.testing.assert_allclose(filter_logits(ties, temperature=0.5), 2 * ties)


@functools.lru_cache  # one step function (static under jit) per `probs`
def constant_model(probs):
  """A step function with one next-token distribution for every row."""
  logits = jnp.log(jnp.asarray(probs, jnp.float32))
  return lambda tokens, state: (jnp.broadcast_to(
      logits, (tokens.shape[0], len(probs))), state)


def draw(probs, rows=2000, steps=5, seed=0, **kwargs):
  """[rows * steps] tokens sampled from a fixed distribution, no EOS.

  The model also gives padding (a column before `probs`) a fifth of the
  mass, which sampling must never draw; the ids returned are `probs`'s.
  """
  step_fn = constant_model(
      tuple(np.concatenate([[0.2], 0.8 * np.asarray(probs)])))
  tokens, lengths = sample(
      step_fn, jnp.zeros((rows,)), rng=jax.random.key(seed),
      batch_size=rows, max_new_tokens=steps, eos_id=-1,
      prompt_last=jnp.zeros((rows,), jnp.int32), **kwargs)
  assert (np.asarray(lengths) == steps).all()
  tokens = np.asarray(tokens).reshape(-1)
  assert (tokens > 0).all(), 'padding was sampled'
  return tokens - 1


def frequencies(tokens, vocab):
  return np.bincount(tokens, minlength=vocab) / len(tokens)


def entropy(freqs):
  freqs = freqs[freqs > 0]
  return -(freqs * np.log(freqs)).sum()


@pytest.mark.parametrize('kwargs', [dict(top_p=0.75), dict(top_k=3),
                                    dict(top_k=3, top_p=0.84)])
def test_sampling_never_emits_filtered_tokens(kwargs):
  logits = jnp.log(jnp.asarray(PROBS, jnp.float32))[None]
  allowed = np.isfinite(np.asarray(filter_logits(logits, **kwargs)))
  freqs = frequencies(draw(PROBS, **kwargs), len(PROBS))
  assert (freqs[~allowed[0]] == 0).all()
  # The kept tokens come in their renormalised proportions.
  expected = np.where(allowed[0], PROBS, 0) / PROBS[allowed[0]].sum()
  np.testing.assert_allclose(freqs, expected, atol=0.02)


def test_temperature_goes_from_greedy_to_uniform():
  cold, warm, hot = (frequencies(draw(PROBS, temperature=t), len(PROBS))
                     for t in (0.01, 1.0, 10.0))
  np.testing.assert_array_equal(cold, [0, 1, 0, 0])
  assert entropy(warm) == pytest.approx(entropy(PROBS), abs=0.03)
  assert entropy(warm) < entropy(hot) <= np.log(len(PROBS))
  tempered = PROBS ** 0.1 / (PROBS ** 0.1).sum()  # about uniform
  np.testing.assert_allclose(hot, tempered, atol=0.02)
  assert entropy(hot) == pytest.approx(np.log(len(PROBS)), abs=0.02)


def test_top_k_one_samples_greedy_search():
  model, batch = hash_model(vocab=6, max_length=8, seed=1, eos_bias=1.0), 16
  expected, _ = greedy_search(
      model.step, model.cache(np.arange(batch)), batch_size=batch,
      max_length=8, eos_id=EOS)
  run = functools.partial(
      sample, model.step, model.cache(np.arange(batch)),
      batch_size=batch, max_new_tokens=8, eos_id=EOS,
      prompt_last=jnp.zeros((batch,), jnp.int32))  # the start token
  for kwargs in ([dict(greedy=True, rng=jax.random.key(0))] +
                 [dict(top_k=1, temperature=2.0, rng=jax.random.key(seed))
                  for seed in range(3)]):
    tokens, lengths = run(**kwargs)
    np.testing.assert_array_equal(tokens, expected)
    np.testing.assert_array_equal(lengths, output_lengths(expected))


def test_a_seed_reproduces_its_samples():
  model, batch = HashModel(vocab=6, max_length=8, seed=1, eos_bias=1.0), 16

  @functools.partial(jax.jit, static_argnames='top_k')
  def run(rng, top_k, top_p):
    return decoding.sample(
        model.step, model.cache(np.arange(batch)), rng=rng,
        batch_size=batch, max_new_tokens=8, eos_id=EOS, top_k=top_k,
        top_p=top_p, prompt_last=jnp.zeros((batch,), jnp.int32))

  tokens, _ = run(jax.random.key(0), 4, 0.9)
  again, _ = run(jax.random.key(0), 4, 0.9)
  np.testing.assert_array_equal(again, tokens)
  eager, _ = decoding.sample(
      model.step, model.cache(np.arange(batch)), rng=jax.random.key(0),
      batch_size=batch, max_new_tokens=8, eos_id=EOS, top_k=4, top_p=0.9,
      prompt_last=jnp.zeros((batch,), jnp.int32))
  np.testing.assert_array_equal(eager, tokens)
  other, _ = run(jax.random.key(1), 4, 0.9)
  assert (np.asarray(other) != np.asarray(tokens)).any()


def test_eos_stops_a_row_pads_with_zeros_and_the_loop_exits_early():
  model, batch, length = HashModel(vocab=5, max_length=12, seed=3,
                                   eos_bias=1.5), 8, 12
  calls = []

  def step_fn(tokens, cache):
    jax.debug.callback(lambda: calls.append(1))
    return model.step(tokens, cache)

  tokens, lengths = sample(
      step_fn, model.cache(np.arange(batch)), rng=jax.random.key(0),
      batch_size=batch, max_new_tokens=length, eos_id=EOS,
      prompt_last=jnp.zeros((batch,), jnp.int32))
  jax.effects_barrier()
  tokens, lengths = np.asarray(tokens), np.asarray(lengths)
  np.testing.assert_array_equal(lengths, output_lengths(tokens))
  assert len(set(lengths)) > 2 and lengths.max() < length  # all rows end
  position = np.arange(length)
  assert ((tokens == EOS) == (position == lengths[:, None] - 1)).all()
  assert (tokens[position >= lengths[:, None]] == 0).all()
  # One step per token (prompt_last's gives the first), none after the last.
  assert len(calls) == lengths.max()


# ----------------------------------------------------------------------------
# The GPT with its KV cache
# ----------------------------------------------------------------------------

PROMPT = np.array([[5, 9, 2], [11, 3, 14]], np.int32)


@pytest.fixture(scope='module')
def gpt():
  """Tiny random GPT, its jitted full forward pass and an EOS it emits."""
  config = decoder.config_for('tiny', vocab_size=17, max_length=MAX_LEN,
                              dropout_rate=0.0)
  model = decoder.Decoder(config)
  params = nn.unbox(jax.jit(functools.partial(
      model.init, jax.random.key(0), deterministic=True))(PROMPT))
  full = jax.jit(lambda tokens: model.apply(params, tokens,
                                            deterministic=True))
  gpt = dict(config=config, params=params, full=full)
  # An EOS the greedy model emits early in one row: rows end apart.
  gpt['eos_id'] = int(full_forward_sampling(gpt, -1, greedy=True)[1, 3])
  return gpt


def full_forward_sampling(gpt, eos_id, *, rng=None, greedy=False, **kwargs):
  """Per step, a token from the uncached pass on prompt + tokens so far."""
  tokens = np.zeros((len(PROMPT), MAX_LEN), np.int32)
  tokens[:, :PROMPT.shape[1]] = PROMPT
  done = np.zeros(len(PROMPT), bool)

  @jax.jit  # one program for every step (eagerly, one per operation)
  def draw_token(logits, step):
    # Padding (id 0) is never a candidate, so not among the top k.
    return decoding.sample_tokens(jax.random.fold_in(rng, step),
                                  logits.at[:, 0].set(-jnp.inf), **kwargs)

  for i in range(PROMPT.shape[1], MAX_LEN):
    # The pass is causal, so position i - 1 sees tokens[:, :i] only: one
    # padded shape for all steps compiles once. Position i - 1 picked out
    # in NumPy: a jax slice at each constant i would compile anew.
    logits = np.asarray(gpt['full'](tokens))[:, i - 1]
    if greedy:
      token = logits.argmax(-1)
    else:
      token = draw_token(logits, i - PROMPT.shape[1])
    tokens[:, i] = np.where(done, 0, token)
    done |= tokens[:, i] == eos_id
  return tokens[:, PROMPT.shape[1]:]


def gpt_sample(gpt, **kwargs):
  """`decoding.sample` under jit after a KV-cache prefill with the prompt."""
  model = decoder.build(gpt['config'], decode=True)
  batch, new = len(PROMPT), MAX_LEN - PROMPT.shape[1]

  @jax.jit
  def run(params, rng):
    apply = functools.partial(model.apply, deterministic=True,
                              mutable=['cache'])
    # A dummy call of the maximum length creates the cache, then the whole
    # prompt fills it at once.
    _, cache = apply(params, jnp.zeros((batch, MAX_LEN), jnp.int32))
    logits, cache = apply({**params, **cache}, jnp.asarray(PROMPT))

    def step_fn(tokens, cache):
      logits, cache = apply({**params, 'cache': cache}, tokens)
      return logits[:, -1], cache['cache']

    return decoding.sample(step_fn, cache['cache'], rng=rng,
                           batch_size=batch, max_new_tokens=new,
                           eos_id=gpt['eos_id'], first_logits=logits[:, -1],
                           **kwargs)

  return run(gpt['params'], jax.random.key(7))


@pytest.mark.parametrize('kwargs', [
    dict(greedy=True), dict(temperature=0.8, top_k=6, top_p=0.9)])
def test_gpt_sampling_with_kv_cache_equals_full_forward(gpt, kwargs):
  tokens, lengths = gpt_sample(gpt, **kwargs)
  expected = full_forward_sampling(gpt, gpt['eos_id'],
                                   rng=jax.random.key(7), **kwargs)
  np.testing.assert_array_equal(tokens, expected)
  np.testing.assert_array_equal(lengths,
                                output_lengths(expected, gpt['eos_id']))
  if kwargs.get('greedy'):
    assert len(set(np.asarray(lengths))) == 2  # one row ends early


def test_searches_never_emit_padding_even_when_it_is_most_likely():
  # Padding (0) has 0.6 of the mass, token 2 the most of the rest; no EOS,
  # so every output runs to max_length and any 0 would be a generated one.
  step_fn = constant_model((0.6, 0.05, 0.25, 0.1))
  greedy, _ = greedy_search(step_fn, jnp.zeros((2,)), batch_size=2,
                            max_length=3, eos_id=-1)
  np.testing.assert_array_equal(greedy, [[2, 2, 2]] * 2)
  beams, scores = beam_search(step_fn, jnp.zeros((2,)), batch_size=2,
                              beam_size=2, max_length=3, eos_id=-1,
                              alpha=0.0)
  assert (np.asarray(beams) != 0).all()
  np.testing.assert_array_equal(beams[:, 0], [[2, 2, 2]] * 2)
  # Scores stay the model's log-probabilities (normalised over every id).
  np.testing.assert_allclose(scores[:, 0], 3 * np.log(0.25), rtol=1e-5)
