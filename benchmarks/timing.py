"""Timing shared by the benchmarks (imported as `timing`: the benchmarks run
as scripts, `python benchmarks/<name>.py`, with this folder on the path)."""

import functools
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer import configs
from transformer import train
from transformer.models import decoder
from transformer.tasks import language_modeling


def median_seconds(fn, *args, repeats: int) -> float:
  """Median wall time of `repeats` calls after one compiling warm-up call."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def steady_step_seconds(step, state, batch, *, steps: int) -> float:
  """Seconds per train step run back to back, as a training loop runs them.

  The batch is put on the device once (a loop's next batch is transferred
  while the current step runs) and each step takes the state the last one
  returned, with no wait between steps: one wait after `steps` of them
  (and one compiling warm-up step before). Timing each step by itself
  would add its transfer and the host's dispatch to every step, time in
  which a GPU runs nothing. `step(state, batch)` returns the new state
  first."""
  batch = jax.device_put(batch)
  state = jax.block_until_ready(step(state, batch)[0])
  start = time.perf_counter()
  for _ in range(steps):
    state = step(state, batch)[0]
  jax.block_until_ready(state)
  return (time.perf_counter() - start) / steps


def compiled_cost(compiled) -> str:
  """XLA's FLOP and byte counts of a compiled program, for a table."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return (f'XLA {cost.get("flops", float("nan")) / 1e9:,.0f} GFLOP, '
          f'{cost.get("bytes accessed", float("nan")) / 1e9:,.2f} GB')


def interleaved_steps(steps: dict, repeats: int) -> dict[str, list[float]]:
  """Seconds of each round's train steps, timed in turn, each round running
  every step once, so that the machine's drift reaches all of them alike.

  `steps` maps a name to (step, state, batch); a step returns its new
  state first (and may donate the old one), then what it reports.
  """
  states = {name: state for name, (_, state, _) in steps.items()}
  times = {name: [] for name in steps}
  for repeat in range(repeats + 1):  # the first round is a warm-up
    for name, (step, _, batch) in steps.items():
      start = time.perf_counter()
      states[name], *reported = step(states[name], batch)
      jax.block_until_ready(reported)
      if repeat:
        times[name].append(time.perf_counter() - start)
  return times


def comparison(anchor_name: str, anchor: list[float], ours: list[float]
               ) -> str:
  """'step ms (median of n): <anchor> a, ours b; <anchor> / ours r', with
  the range of the rounds' own ratios: on a shared machine the medians'
  ratio moves by a few percent from run to run, and the range shows by
  how much within this one."""
  a, o = 1e3 * np.median(anchor), 1e3 * np.median(ours)
  rounds = np.asarray(anchor) / np.asarray(ours)
  return (f'step ms (median of {len(ours)}): {anchor_name} {a:,.0f}, ours '
          f'{o:,.0f}; {anchor_name} / ours {a / o:.2f}x (rounds '
          f'{rounds.min():.2f}x to {rounds.max():.2f}x)')


def default_train_step(**kwargs):
  """`train.train_step` as a run of the default config jits it: with
  config.train.nonfinite='stop' a non-finite step ends the run, so the step
  keeps no old state (`skip_nonfinite` False)."""
  return functools.partial(
      train.train_step, skip_nonfinite=(
          configs.default_config().train.nonfinite == 'skip'), **kwargs)


def matmul_flops_per_second(n: int, dtype, repeats: int,
                            chain: int = 1) -> float:
  """FLOP/s of n x n matmuls: the reference for utilisation figures.

  Random operands (zeros and ones run faster than real data on some
  devices); `chain` products in one program, each multiplying the last
  one's result, so that on an accelerator one call's launch and dispatch
  are not counted against the matrix units (one 4096 product on an H200
  measured 143 to 439 TFLOP/s from run to run).
  """
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.standard_normal((n, n)), dtype)
  b = jnp.asarray(rng.standard_normal((n, n)) / np.sqrt(n), dtype)
  chained = jax.jit(lambda a, b: jax.lax.fori_loop(
      0, chain, lambda _, x: x @ b, a))
  return 2 * n**3 * chain / median_seconds(chained, a, b, repeats=repeats)


def matvec_bytes_per_second(nbytes: int, dtype, repeats: int,
                            chain: int = 1) -> float:
  """Bytes/s read by matrix-vector products over an `nbytes` matrix.

  What batch-1 decoding does with each weight matrix, so it is the measured
  reference for memory-bound figures (beside the datasheet bandwidth).
  Random data; `chain` products in one program, as for the matmul.
  """
  itemsize = jnp.dtype(dtype).itemsize
  columns = 4096
  rng = np.random.default_rng(0)
  matrix = jnp.asarray(rng.standard_normal(
      (nbytes // itemsize // columns, columns)) / np.sqrt(columns), dtype)
  vector = jnp.asarray(rng.standard_normal(columns), dtype)
  chained = jax.jit(lambda m, v: jax.lax.fori_loop(
      0, chain, lambda _, x: (m @ x)[:columns], v))
  return matrix.nbytes * chain / median_seconds(chained, matrix, vector,
                                                repeats=repeats)


def percent(value: float, reference: float | None) -> str:
  """'42.0%' of a reference, or 'n/a' without one (e.g. no datasheet)."""
  return 'n/a' if reference is None else f'{100 * value / reference:.1f}%'


def gpt_generation_seconds(config, params, *, batch: int, prompt_length: int,
                           new_tokens: int, repeats: int, **sampling
                           ) -> tuple[float, float]:
  """(time to the first token, time per later token) of
  `language_modeling.generate_tokens` (what `generate` runs) for `batch`
  random prompts of `prompt_length` tokens; EOS is never chosen, so every
  row generates `new_tokens`. `sampling`: top_k, greedy."""
  model = decoder.build(config, decode=True)
  prompts = jnp.asarray(np.random.default_rng(0).integers(
      3, config.vocab_size, (batch, prompt_length)), jnp.int32)
  args = (params, prompts, jnp.zeros((batch,), jnp.int32),
          jax.random.key(0), 1.0, 1.0)
  first, full = (median_seconds(jax.jit(functools.partial(
      language_modeling.generate_tokens, model, max_new_tokens=n,
      eos_id=-1, **sampling)), *args, repeats=repeats)
                 for n in (1, new_tokens))
  if full <= first:  # a per-token time below the timer's noise
    raise ValueError(
        f'{new_tokens} new tokens took no longer than one ({full * 1e3:.2f} '
        f'against {first * 1e3:.2f} ms): too few to time this model; raise '
        f'--new_tokens or --repeats.')
  return first, (full - first) / (new_tokens - 1)


def random_decoder_params(config):
  """Randomly initialised GPT parameters (speed does not depend on them)."""
  return jax.jit(lambda r: nn.unbox(decoder.Decoder(config).init(
      r, jnp.ones((1, 8), jnp.int32), deterministic=True))['params'])(
          jax.random.key(0))
