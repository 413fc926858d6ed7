"""Beam search for language models: translation's search (GNMT penalty,
EOS ends a hypothesis) continuing left-padded prompts from a prefilled KV
cache finds exactly the best of all continuations, scored without a cache;
beam 1 is greedy (the command, which takes --beam_size and refuses what it
cannot mean: e2e/test_lm_beam_e2e.py)."""

import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import decoding
from transformer.data import tokenization
from transformer.models import decoder
from transformer.tasks import language_modeling

EOS = tokenization.EOS_ID
VOCAB, NEW = 6, 3  # ids 1..5 (0 is padding): 1 + 4 + 80 continuations
PROMPTS = [[3, 4, 2], [5]]  # left-padded to one width


@functools.lru_cache
def tiny(size):
  """(config, model, params), initialised once per size and process
  (parameters are immutable) and under jit: eagerly every operation of
  `init` compiles on its own, a second or more."""
  config = decoder.config_for(size, vocab_size=VOCAB, max_length=16,
                              dropout_rate=0.0, num_layers=2, d_model=32,
                              num_heads=4, d_ff=64)
  model = decoder.Decoder(config)
  params = nn.unbox(jax.jit(functools.partial(
      model.init, jax.random.key(3), deterministic=True))(
          jnp.ones((1, 4), jnp.int32)))['params']
  # Sharper than at initialisation, so that a continuation's length and
  # the penalty decide which is best (near-uniform, EOS at once would win).
  return config, model, jax.tree.map(lambda x: 3 * x, params)


@functools.lru_cache
def beam(size, beam_size, max_new_tokens):
  """`beam_tokens` of the decode-mode model of `size` under jit, `alpha` a
  traced argument as the command passes it: one compile serves every
  penalty."""
  decode = decoder.build(tiny(size)[0], decode=True)
  return jax.jit(functools.partial(language_modeling.beam_tokens, decode,
                                   beam_size=beam_size,
                                   max_new_tokens=max_new_tokens))


def left_padded(prompts):
  width = max(map(len, prompts))
  tokens = np.zeros((len(prompts), width), np.int32)
  for row, prompt in enumerate(prompts):
    tokens[row, width - len(prompt):] = prompt
  return tokens, np.asarray([width - len(p) for p in prompts], np.int32)


def every_continuation():
  """Each continuation the search can return: ending at EOS, or cut at NEW
  tokens (EOS or not). Padding is never generated."""
  found = []
  for length in range(1, NEW + 1):
    for tokens in itertools.product(range(1, VOCAB), repeat=length):
      if EOS in tokens[:-1] or (length < NEW and tokens[-1] != EOS):
        continue
      found.append(tokens)
  return found


@functools.partial(jax.jit, static_argnums=0)
def full_log_probs(model, params, rows):
  """[N, T, V] log-probabilities of the plain model, one program."""
  return jax.nn.log_softmax(
      model.apply({'params': params}, rows, deterministic=True), -1)


@functools.lru_cache
def continuation_log_probs(size, prompt):
  """(every continuation, the plain (uncached, unpadded) model's [M, P +
  NEW, V] log-probabilities of prompt + each), once per model and prompt:
  the penalty changes only how they are ranked."""
  _, model, params = tiny(size)
  candidates = every_continuation()
  assert len(candidates) == 85
  # One width for every prompt, so that both compile one program: the
  # model is causal, so padding after a row's tokens changes nothing
  # before it (shorter continuations are padded so anyway).
  rows = np.zeros((len(candidates), max(map(len, PROMPTS)) + NEW), np.int32)
  for row, tokens in enumerate(candidates):
    rows[row, :len(prompt) + len(tokens)] = list(prompt) + list(tokens)
  return candidates, np.asarray(full_log_probs(model, params, rows))


def best_without_cache(size, prompt, alpha):
  """The continuation of the highest penalised log-probability, every one
  scored by the plain (uncached, unpadded) model."""
  candidates, log_probs = continuation_log_probs(size, tuple(prompt))
  scores = []
  for row, tokens in enumerate(candidates):
    total = sum(float(log_probs[row, len(prompt) - 1 + i, t])
                for i, t in enumerate(tokens))
    scores.append(total / decoding.length_penalty(len(tokens), alpha))
  order = np.argsort(scores)[::-1]
  assert scores[order[0]] - scores[order[1]] > 1e-4  # one best, clearly
  return list(candidates[order[0]]), candidates


@pytest.mark.parametrize('size', ['tiny', 'llama-tiny'])
@pytest.mark.parametrize('alpha', [0.0, 0.6, 1.0])
def test_a_wide_beam_finds_the_best_of_all_continuations(size, alpha):
  _, _, params = tiny(size)
  tokens, pad = left_padded(PROMPTS)
  found = beam(size, 216, NEW)(params, tokens, pad, alpha=alpha)
  for row, prompt in enumerate(PROMPTS):
    best, _ = best_without_cache(size, prompt, alpha)
    got = [int(t) for t in found[row]]
    got = got[:got.index(EOS) + 1] if EOS in got else got
    assert got == best, (row, got, best)


def test_the_best_depends_on_the_penalty():
  # Else the penalty test above checks one answer three times.
  bests = {tuple(best_without_cache('tiny', PROMPTS[0], alpha)[0])
           for alpha in (0.0, 0.6, 1.0)}
  assert len(bests) > 1 and max(map(len, bests)) == NEW, bests


def test_beam_one_without_penalty_is_greedy():
  _, model, params = tiny('tiny')
  decode = decoder.build(model.config, decode=True)
  tokens, pad = left_padded([[3, 4, 2], [5, 2]])
  beam_one = beam('tiny', 1, 6)(params, tokens, pad, alpha=0.0)
  # Under jit, as the command samples: eagerly every operation of the
  # prefill compiles on its own.
  greedy, _ = jax.jit(functools.partial(
      language_modeling.generate_tokens, decode, max_new_tokens=6, top_k=0,
      greedy=True))(params, tokens, pad, jax.random.key(0), 1.0, 1.0)
  np.testing.assert_array_equal(beam_one, greedy)
