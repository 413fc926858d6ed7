"""Timing shared by the benchmarks (imported as `timing`: the benchmarks run
as scripts, `python benchmarks/<name>.py`, with this folder on the path)."""

import time

import jax
import jax.numpy as jnp
import numpy as np


def median_seconds(fn, *args, repeats: int) -> float:
  """Median wall time of `repeats` calls after one compiling warm-up call."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def matmul_flops_per_second(n: int, dtype, repeats: int) -> float:
  """FLOP/s of an n x n matmul: the reference for utilisation figures."""
  a = jnp.ones((n, n), dtype)
  return 2 * n**3 / median_seconds(jax.jit(jnp.matmul), a, a,
                                   repeats=repeats)
