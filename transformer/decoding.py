"""Greedy and beam search over an abstract, one-token-at-a-time decoder.

The decoder is a step function

  step_fn(tokens: int32 [N, 1], cache) -> (logits: float32 [N, V], cache)

where N is the number of rows decoded together (B for greedy search,
B * beam_size for beam search) and `cache` is any pytree carried from one
step to the next: a Transformer's KV cache, an RNN's state. Cache leaves with
ndim >= 1 have the row axis first; leaves with ndim == 0 (e.g. a KV-cache
write index) are shared by all rows and pass untouched when beams are tiled
or reordered. The step function must return a cache of the same structure,
shapes and dtypes, since it is the carry of a `jax.lax.while_loop`.

Output conventions follow the Transformer's: the first input token is
`start_id` (0), EOS is kept in the output and every position after it is 0
(padding). A hypothesis that reaches `max_length` without EOS ends there,
truncated, and competes with the others at length `max_length`.

`max_lengths` ([B] int, optional) caps each example's output length, EOS
included: at position `max_lengths[b] - 1` every token but EOS is masked, so
an output that has not ended yet ends with a forced EOS, scored with the
model's log-probability of EOS there. Caps above `max_length` change nothing,
caps below 1 behave as 1.

Both searches run under `jax.jit` with `step_fn` closed over; `batch_size`,
`beam_size` and `max_length` are static (they are shapes). Both stop as soon
as nothing can change any more.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

Array = jax.Array
StepFn = Callable[[Array, Any], tuple[Array, Any]]


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
  return ((5.0 + length) / 6.0) ** alpha


def _limits(max_lengths, batch_size: int, max_length: int) -> Array:
  """[B] int32 output-length caps; without `max_lengths`, never reached."""
  if max_lengths is None:
    return jnp.full((batch_size,), max_length + 1, jnp.int32)
  return jnp.asarray(max_lengths, jnp.int32).reshape(batch_size)


def _log_probs(logits: Array, force_eos: Array, eos_id: int) -> Array:
  """[..., V] logits -> log-probabilities; only EOS where `force_eos` [...]."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
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
    cache: its initial cache for B rows; tiled here to B * beam_size.
    batch_size: B.
    beam_size: K.
    max_length: L, the longest output.
    eos_id: end-of-sequence token.
    alpha: length-penalty exponent, >= 0; 0 ranks by log-probability.
    start_id: the first input token.
    max_lengths: optional [B] int, per-example caps on the output length.

  Returns:
    sequences: [B, K, L] int32, best first, 0 after EOS.
    scores: [B, K] float32, their length-penalised log-probabilities.
  """
  b, k = batch_size, beam_size
  force_from = _limits(max_lengths, b, max_length)[:, None] - 1  # [B, 1]
  cache = jax.tree.map(
      lambda x: jnp.repeat(x, k, axis=0) if jnp.ndim(x) else x, cache)
  # Sequences keep the start token in column 0: column i is step i's input.
  live_seqs = jnp.zeros((b, k, max_length + 1), jnp.int32).at[..., 0].set(
      start_id)
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

  def body(state):
    i, live_seqs, live_logp, fin_seqs, fin_scores, cache = state
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
    cache = jax.tree.map(lambda x: x[rows] if jnp.ndim(x) else x, cache)

    # EOS counts only within the top K (so beam 1 is greedy); at the last
    # position everything ends, truncated or not.
    finishes = (ends & (jnp.arange(2 * k) < k)) | (i == max_length - 1)
    scores = jnp.where(finishes, cand_logp / length_penalty(i + 1, alpha),
                       -jnp.inf)
    fin_scores, best = jax.lax.top_k(
        jnp.concatenate([fin_scores, scores], axis=1), k)
    fin_seqs = _gather(jnp.concatenate([fin_seqs, cand_seqs], axis=1), best)
    return i + 1, live_seqs, live_logp, fin_seqs, fin_scores, cache

  state = (jnp.array(0), live_seqs, live_logp, fin_seqs, fin_scores, cache)
  _, _, _, fin_seqs, fin_scores, _ = jax.lax.while_loop(cond, body, state)
  return fin_seqs[:, :, 1:], fin_scores
