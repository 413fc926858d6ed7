"""Greedy search, beam search and sampling over a token-by-token decoder.

The decoder is a step function

  step_fn(tokens: int32 [N, 1], cache) -> (logits: float32 [N, V], cache)

where N is the number of rows decoded together (B for greedy search,
B * beam_size for beam search) and `cache` is any pytree carried from one
step to the next: a Transformer's KV cache, an RNN's state. Cache leaves with
ndim >= 1 have the row axis first; leaves with ndim == 0 (e.g. a KV-cache
write index) are shared by all rows and pass untouched when beams are tiled
or reordered. The step function must return a cache of the same structure,
shapes and dtypes, since it is the carry of a `jax.lax.while_loop`.

What the beams of one example share (an encoder's output, the keys and
values cross-attention projects from it) can be wrapped in `PerExample`:
beam search neither tiles nor reorders it, so it keeps B rows while the
other leaves have B * beam_size, and a step function reading it groups its
rows by example (row b * beam_size + k belongs to example b). Copying it
into every beam and gathering it again at every step would only move
identical rows. What is wrapped in `PerSlot` is tiled but never reordered:
its rows are slots that keep what the beam in them wrote, and the step
function finds each beam's history through a map it keeps in the reordered
part of the state (`transformer.beam_slots`: the KV cache, never copied).

Output conventions follow the Transformer's: the first input token is
`start_id` (0), EOS is kept in the output and every position after it is 0
(padding). Padding (id 0) is never generated, whatever its logit (as in
fairseq and Hugging Face: converted models such as Marian score it). A
hypothesis that reaches `max_length` without EOS ends there, truncated, and
competes with the others at length `max_length`.

`max_lengths` ([B] int, optional) caps each example's output length, EOS
included: at position `max_lengths[b] - 1` every token but EOS is masked, so
an output that has not ended yet ends with a forced EOS, scored with the
model's log-probability of EOS there. Caps above `max_length` change nothing,
caps below 1 behave as 1.

Both searches run under `jax.jit` with `step_fn` closed over; `batch_size`,
`beam_size` and `max_length` are static (they are shapes). Both stop as soon
as nothing can change any more.

`sample` continues prompts the caller has already run through the model
(temperature, top-k and top-p filtering by `filter_logits`), with the same
step function, EOS and padding conventions.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

Array = jax.Array
StepFn = Callable[[Array, Any], tuple[Array, Any]]


@functools.partial(jax.tree_util.register_dataclass, data_fields=['tree'],
                   meta_fields=[])
@dataclasses.dataclass
class PerExample:
  """Decoding state with one row per example, shared by its beams."""
  tree: Any


@functools.partial(jax.tree_util.register_dataclass, data_fields=['tree'],
                   meta_fields=['beam_size'])
@dataclasses.dataclass
class PerSlot:
  """Decoding state with one row per beam slot: tiled, never reordered;
  kept for a beam search of `beam_size` (1: nothing is kept in slots)."""
  tree: Any
  beam_size: int = 1


def _check_slots(cache: Any, beam_size: int) -> None:
  """Refuses state whose slots were laid out for another beam size: its
  rows would be grouped into the wrong examples."""
  for part in jax.tree.leaves(cache, is_leaf=lambda x: isinstance(
      x, PerSlot)):
    if isinstance(part, PerSlot) and part.beam_size not in (1, beam_size):
      raise ValueError(
          f'The decoding state keeps its history in slots for a beam '
          f'search of {part.beam_size}, not {beam_size}: build it with '
          f'beam_size={beam_size} (e.g. init_decoding(..., beam_size='
          f'{beam_size})).')


def _per_row(fn: Callable[[Array], Array], cache: Any, *,
             reordering: bool = False) -> Any:
  """fn over the cache leaves that have a row axis (ndim >= 1), leaving
  scalars and whatever is `PerExample` as it is, and `PerSlot` when
  `reordering`."""
  kept = (PerExample, PerSlot) if reordering else PerExample
  return jax.tree.map(
      lambda x: x if isinstance(x, kept) or not jnp.ndim(x) else fn(x),
      cache, is_leaf=lambda x: isinstance(x, kept))


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
  return ((5.0 + length) / 6.0) ** alpha


def _limits(max_lengths, batch_size: int, max_length: int) -> Array:
  """[B] int32 output-length caps; without `max_lengths`, never reached."""
  if max_lengths is None:
    return jnp.full((batch_size,), max_length + 1, jnp.int32)
  return jnp.asarray(max_lengths, jnp.int32).reshape(batch_size)


PAD_ID = 0


def _without_padding(scores: Array) -> Array:
  """[..., V] logits or log-probabilities with padding at -inf."""
  return scores.at[..., PAD_ID].set(-jnp.inf)


def _log_probs(logits: Array, force_eos: Array, eos_id: int) -> Array:
  """[..., V] logits -> log-probabilities (the model's, normalised over
  every id); padding excluded, and only EOS where `force_eos` [...]."""
  log_probs = _without_padding(jax.nn.log_softmax(logits.astype(jnp.float32)))
  others = jnp.arange(log_probs.shape[-1]) != eos_id
  return jnp.where(force_eos[..., None] & others, -jnp.inf, log_probs)


def greedy_search(step_fn: StepFn, cache: Any, *, batch_size: int,
                  max_length: int, eos_id: int, start_id: int = 0,
                  max_lengths: Array | None = None) -> tuple[Array, Array]:
  """Emits the most likely next token at every step.

  Args:
    step_fn: the decoder step (module docstring), called with N = B rows.
    cache: its initial cache, rows [B, ...].
    batch_size: B.
    max_length: L, the longest output.
    eos_id: end-of-sequence token.
    start_id: the first input token.
    max_lengths: optional [B] int, per-example caps on the output length.

  Returns:
    tokens: [B, L] int32, 0 after EOS.
    log_probs: [B] float32, summed log-probabilities of the emitted tokens
      (EOS included).
  """
  _check_slots(cache, 1)
  limits = _limits(max_lengths, batch_size, max_length)

  def cond(state):
    i, _, _, _, done, _ = state
    return (i < max_length) & ~jnp.all(done)

  def body(state):
    i, tokens, last, total, done, cache = state
    logits, cache = step_fn(last[:, None], cache)
    log_probs = _log_probs(logits, i >= limits - 1, eos_id)
    token = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
    gain = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    # Finished rows keep stepping (the batch moves together) but emit pads.
    token = jnp.where(done, 0, token)
    total = total + jnp.where(done, 0.0, gain)
    return (i + 1, tokens.at[:, i].set(token), token, total,
            done | (token == eos_id), cache)

  state = (jnp.array(0), jnp.zeros((batch_size, max_length), jnp.int32),
           jnp.full((batch_size,), start_id, jnp.int32),
           jnp.zeros((batch_size,), jnp.float32),
           jnp.zeros((batch_size,), bool), cache)
  _, tokens, _, total, _, _ = jax.lax.while_loop(cond, body, state)
  return tokens, total


def _gather(x: Array, indices: Array) -> Array:
  """x [B, M, ...], indices [B, K] -> [B, K, ...], x[b, indices[b, k]]."""
  return jax.vmap(lambda row, i: row[i])(x, indices)


def beam_search(step_fn: StepFn, cache: Any, *, batch_size: int,
                beam_size: int, max_length: int, eos_id: int,
                alpha: float = 0.6, start_id: int = 0,
                max_lengths: Array | None = None) -> tuple[Array, Array]:
  """Beam search with the GNMT length penalty, as in flax's WMT example.

  Keeps per example `beam_size` live hypotheses (sorted by log-probability)
  and the `beam_size` best finished ones (by log-probability divided by
  `length_penalty` of their length, EOS included). Each step ranks the top
  2 * beam_size extensions of the live beams: at most beam_size of them end
  in EOS (one per beam), so the live set never starves. As in fairseq and
  Hugging Face, an EOS extension finishes a hypothesis only when it ranks
  among the top beam_size, which makes beam_size=1 with alpha=0 exactly
  greedy search. The search ends when no live beam can beat the worst
  finished one, with the bound taken at `max_length` (valid for alpha >= 0:
  log-probabilities only fall and the penalty only grows). At the last
  position every candidate finishes, so an example always has finished
  hypotheses; slots beyond the number of distinct hypotheses score -inf.

  Args:
    step_fn: the decoder step (module docstring), called with
      N = B * beam_size rows; row b * beam_size + k is beam k of example b.
    cache: its initial cache for B rows; tiled here to B * beam_size, but
      for what is `PerExample`, and reordered with the beams, but for what
      is `PerExample` or `PerSlot`.
    batch_size: B.
    beam_size: K.
    max_length: L, the longest output.
    eos_id: end-of-sequence token.
    alpha: length-penalty exponent, >= 0; 0 ranks by log-probability.
    start_id: the first input token, or [B] of them, one per example (a
      language model's: each prompt's last token).
    max_lengths: optional [B] int, per-example caps on the output length.

  Returns:
    sequences: [B, K, L] int32, best first, 0 after EOS.
    scores: [B, K] float32, their length-penalised log-probabilities.
  """
  b, k = batch_size, beam_size
  _check_slots(cache, k)
  force_from = _limits(max_lengths, b, max_length)[:, None] - 1  # [B, 1]
  cache = _per_row(lambda x: jnp.repeat(x, k, axis=0), cache)
  # Sequences keep the start token in column 0: column i is step i's input.
  starts = jnp.broadcast_to(jnp.asarray(start_id, jnp.int32).reshape(-1, 1),
                            (b, k))
  live_seqs = jnp.zeros((b, k, max_length + 1), jnp.int32).at[..., 0].set(
      starts)
  # Only beam 0 starts live, or the K identical beams would fill the top K.
  live_logp = jnp.broadcast_to(
      jnp.where(jnp.arange(k) == 0, 0.0, -jnp.inf), (b, k))
  fin_seqs, fin_scores = live_seqs, jnp.full((b, k), -jnp.inf)

  def cond(state):
    i, _, live_logp, _, fin_scores, _ = state
    best_live = live_logp.max(axis=1)
    bound = best_live / length_penalty(max_length, alpha)
    done = (best_live == -jnp.inf) | (fin_scores.min(axis=1) > bound)
    return (i < max_length) & ~jnp.all(done)

  body = functools.partial(_beam_step, step_fn=step_fn, beam_size=k,
                           max_length=max_length, eos_id=eos_id, alpha=alpha,
                           force_from=force_from)
  state = (jnp.array(0), live_seqs, live_logp, fin_seqs, fin_scores, cache)
  _, _, _, fin_seqs, fin_scores, _ = jax.lax.while_loop(cond, body, state)
  return fin_seqs[:, :, 1:], fin_scores


def _beam_step(state, *, step_fn: StepFn, beam_size: int, max_length: int,
               eos_id: int, alpha: float, force_from: Array):
  """One step of `beam_search`: extends the live beams by one token and
  moves those that end (or reach the last position) among the finished."""
  i, live_seqs, live_logp, fin_seqs, fin_scores, cache = state
  b, k = live_logp.shape[0], beam_size
  logits, cache = step_fn(live_seqs[:, :, i].reshape(b * k, 1), cache)
  log_probs = _log_probs(logits.reshape(b, k, -1), i >= force_from, eos_id)
  vocab = log_probs.shape[-1]
  # Top 2K: at most K end in EOS (one per beam), so K live ones remain.
  cand_logp, cand = jax.lax.top_k(
      (live_logp[..., None] + log_probs).reshape(b, k * vocab), 2 * k)
  beam, token = cand // vocab, cand % vocab
  cand_seqs = _gather(live_seqs, beam).at[:, :, i + 1].set(token)
  ends = token == eos_id

  live_logp, keep = jax.lax.top_k(jnp.where(ends, -jnp.inf, cand_logp), k)
  live_seqs = _gather(cand_seqs, keep)
  rows = (jnp.arange(b)[:, None] * k + _gather(beam, keep)).reshape(-1)
  cache = _per_row(lambda x: x[rows], cache, reordering=True)

  # EOS counts only within the top K (so beam 1 is greedy); at the last
  # position everything ends, truncated or not.
  finishes = (ends & (jnp.arange(2 * k) < k)) | (i == max_length - 1)
  scores = jnp.where(finishes, cand_logp / length_penalty(i + 1, alpha),
                     -jnp.inf)
  fin_scores, best = jax.lax.top_k(
      jnp.concatenate([fin_scores, scores], axis=1), k)
  fin_seqs = _gather(jnp.concatenate([fin_seqs, cand_seqs], axis=1), best)
  return i + 1, live_seqs, live_logp, fin_seqs, fin_scores, cache


def filter_logits(logits: Array, *, temperature: float | Array = 1.0,
                  top_k: int = 0, top_p: float | Array = 1.0) -> Array:
  """Temperature, top-k and nucleus (top-p) filtering of next-token logits.

  Divides by `temperature`, keeps the `top_k` largest logits, then, of the
  distribution those define, the smallest set of tokens whose probabilities
  (sorted descending) sum to at least `top_p` (Holtzman et al., 2020), and
  always the most likely token. Ties are broken by token id, lower first, so
  exactly `top_k` tokens survive the first filter. Filtered logits are -inf.

  Args:
    logits: [N, V] next-token logits.
    temperature: > 0; may be traced. Use greedy decoding for temperature 0.
    top_k: static; 0 keeps all.
    top_p: in [0, 1]; may be traced. 1 keeps all (despite rounding), 0 only
      the most likely token.

  Returns:
    [N, V] float32 logits / temperature, -inf where filtered.
  """
  logits = logits.astype(jnp.float32) / temperature
  kept = _ranked(logits, top_k, top_p)
  if kept is None:
    return logits  # nothing to filter
  ranked, order = kept
  # Back to token order: the kept logits at their ids, -inf elsewhere.
  rows = jnp.arange(logits.shape[0])[:, None]
  return jnp.full_like(logits, -jnp.inf).at[rows, order].set(ranked)


def sample_tokens(rng: Array, logits: Array, *,
                  temperature: float | Array = 1.0, top_k: int = 0,
                  top_p: float | Array = 1.0) -> Array:
  """[N] token ids drawn from `filter_logits(logits, ...)`'s distribution.

  With `top_k`, the draw is among the k kept tokens only: no random numbers
  for the rest of the vocabulary, which cost more than choosing on a CPU
  (docs/benchmarks.md, decoding).
  """
  logits = logits.astype(jnp.float32) / temperature
  kept = _ranked(logits, top_k, top_p)
  if kept is None:
    return jax.random.categorical(rng, logits)
  ranked, order = kept
  choice = jax.random.categorical(rng, ranked)
  return jnp.take_along_axis(order, choice[:, None], axis=-1)[:, 0]


def _ranked(logits: Array, top_k: int,
            top_p: float | Array) -> tuple[Array, Array] | None:
  """(the kept logits in descending order, -inf where top-p drops them;
  their ids), both [N, k] (k = V without top-k); None if nothing is
  filtered. See `filter_logits`."""
  no_nucleus = isinstance(top_p, (int, float)) and top_p >= 1
  if not top_k and no_nucleus:
    return None
  if top_k:
    # The k best only (descending, ties by lower id): no sort of the whole
    # vocabulary, which on a CPU cost more than a GPT-2 step's matmuls.
    ranked, order = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))
  else:
    order = jnp.argsort(-logits, axis=-1)  # descending; stable: ties by id
    ranked = jnp.take_along_axis(logits, order, axis=-1)
  if not no_nucleus:
    probs = jax.nn.softmax(ranked, axis=-1)
    # Probability mass ranked above each token: a token is needed while the
    # tokens before it have not reached top_p yet.
    before = jnp.cumsum(probs, axis=-1) - probs
    first = jnp.arange(ranked.shape[-1]) == 0
    ranked = jnp.where((before < top_p) | (top_p >= 1) | first, ranked,
                       -jnp.inf)
  return ranked, order


def sample(step_fn: StepFn, state: Any, *, rng: Array, batch_size: int,
           max_new_tokens: int, eos_id: int, prompt_last: Array | None = None,
           temperature: float | Array = 1.0, top_k: int = 0,
           top_p: float | Array = 1.0, greedy: bool = False,
           first_logits: Array | None = None) -> tuple[Array, Array]:
  """Samples a continuation of prompts already run through the model.

  The caller runs the prompts through the model first (e.g. one decode-mode
  call on all prompt tokens fills a KV cache) and passes either
  - `first_logits` [B, V], the logits at each prompt's last position, with
    `state` positioned after the whole prompt; or
  - `prompt_last` [B], each prompt's last token, with `state` positioned
    after the rest of the prompt (the first step feeds `prompt_last`).
  Each sampled token is then fed back through `step_fn` (module docstring,
  N = B rows). Prompts of different lengths are the caller's business (e.g.
  left-padding with a mask, or right-aligned caches): `state` must hold,
  for every row, exactly that row's prompt.

  Tokens are drawn by `sample_tokens` (the distribution of
  `filter_logits(logits, temperature, top_k, top_p)`) with the key
  `jax.random.fold_in(rng, i)` at step i, so a seed reproduces its
  samples; `greedy` takes the argmax instead (what top_k=1 samples). A row
  stops after EOS (kept; 0 after it); the loop stops when all rows
  have stopped or after `max_new_tokens`, having called `step_fn` once per
  token but the last (a KV cache needs room for prompt + max_new_tokens - 1
  positions). Runs under `jax.jit` with `batch_size`, `max_new_tokens`,
  `top_k` and `greedy` static.

  Args:
    step_fn: the decoder step.
    state: its state after the prompt (see above), rows [B, ...].
    rng: a PRNG key.
    batch_size: B.
    max_new_tokens: L, the most tokens generated per row.
    eos_id: end-of-sequence token.
    prompt_last: [B] int, the prompts' last tokens; unused with
      `first_logits`.
    temperature, top_k, top_p: see `filter_logits`; ignored when greedy.
    greedy: take the most likely token.
    first_logits: [B, V], the logits at the prompts' last positions.

  Returns:
    tokens: [B, L] int32, 0 after EOS.
    lengths: [B] int32, tokens generated per row, EOS included.
  """
  _check_slots(state, 1)
  if first_logits is None:
    if prompt_last is None:
      raise ValueError('Pass first_logits or prompt_last.')
    first_logits, state = step_fn(
        jnp.asarray(prompt_last, jnp.int32).reshape(batch_size, 1), state)

  choose = functools.partial(_choose, rng=rng, greedy=greedy,
                             temperature=temperature, top_k=top_k,
                             top_p=top_p, eos_id=eos_id)

  def cond(carry):
    i, _, _, done, _, _ = carry
    return (i < max_new_tokens) & ~jnp.all(done)

  def body(carry):
    i, token, tokens, done, lengths, state = carry
    logits, state = step_fn(token[:, None], state)
    token, tokens, lengths, done = choose(i, logits, done, tokens, lengths)
    return i + 1, token, tokens, done, lengths, state

  # Step 0 reads `first_logits`; later steps first feed the previous token.
  token, tokens, lengths, done = choose(
      0, first_logits, jnp.zeros((batch_size,), bool),
      jnp.zeros((batch_size, max_new_tokens), jnp.int32),
      jnp.zeros((batch_size,), jnp.int32))
  carry = (jnp.array(1), token, tokens, done, lengths, state)
  _, _, tokens, _, lengths, _ = jax.lax.while_loop(cond, body, carry)
  return tokens, lengths


def _choose(i, logits, done, tokens, lengths, *, rng, greedy, temperature,
            top_k, top_p, eos_id):
  """Step i of `sample`: the next token of each row, written into `tokens`;
  returns it with the updated lengths and finished rows."""
  logits = _without_padding(logits.astype(jnp.float32))
  if greedy:
    token = jnp.argmax(logits, axis=-1)
  else:
    token = sample_tokens(jax.random.fold_in(rng, i), logits,
                          temperature=temperature, top_k=top_k, top_p=top_p)
  # Finished rows keep stepping (the batch moves together) but emit pads.
  token = jnp.where(done, 0, token).astype(jnp.int32)
  return (token, tokens.at[:, i].set(token), lengths + ~done,
          done | (token == eos_id))
