"""Datasheet peaks of the device a benchmark runs on, keyed by
`jax.devices()[0].device_kind`: the one table of `transformer.plan.chips`.

A device not listed (a CPU, say) has no datasheet figure and the benchmarks
print "n/a" beside the rate measured in the same run.
"""

import numpy as np

from transformer.plan import chips


def peak_flops(device_kind: str, dtype) -> float | None:
  """Datasheet FLOP/s of matmuls in `dtype`, or None when unknown.

  The float32 peak is the plain (non-TF32) rate; XLA may run float32
  matmuls as TF32 on NVIDIA GPUs, so float32 utilisation against it can
  pass 100%: the measured matmul is the reference to read there.
  """
  chip = chips.for_device_kind(device_kind)
  if chip is None:
    return None
  dtype = np.dtype(dtype)
  if dtype.itemsize == 2:  # bfloat16, float16
    return chip.bf16_flops
  return chip.float32_flops if dtype == np.float32 else None


def bandwidth(device_kind: str) -> float | None:
  """Datasheet bytes/s of device memory, or None when unknown."""
  chip = chips.for_device_kind(device_kind)
  return None if chip is None else chip.hbm_bandwidth
