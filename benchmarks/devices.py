"""Datasheet peaks of accelerators, keyed by `jax.devices()[0].device_kind`.

Dense matmul FLOP/s (no structured sparsity: NVIDIA's headline tensor
figures are sparse, twice these) and memory bandwidth, from NVIDIA's H100,
H200 and A100 datasheets and Google Cloud's TPU system-architecture pages.
A device not listed (a CPU, say) has no datasheet figure and the benchmarks
print "n/a" beside the rate measured in the same run.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Datasheet:
  bf16: float  # FLOP/s, bfloat16 (and float16) inputs on the tensor units
  float32: float | None  # FLOP/s without TF32; None: not published
  bandwidth: float | None  # bytes/s of device memory; None: varies


# First match wins, so specific names come before the ones they contain
# ('H100 PCIe' before 'H100', 'TPU v5 lite' before 'TPU v5'). None: a
# variant whose figures differ from its family's and are not listed here.
DATASHEETS = (
    ('H100 PCIe', Datasheet(756e12, 51e12, 2.0e12)),
    ('H100 NVL', Datasheet(835e12, 60e12, 3.9e12)),
    ('H100', Datasheet(989.4e12, 67e12, 3.35e12)),  # SXM: 'H100 80GB HBM3'
    ('GH200', Datasheet(989.4e12, 67e12, None)),  # 4.0 or 4.9 TB/s
    ('H200 NVL', Datasheet(835e12, 60e12, 4.8e12)),
    ('H200', Datasheet(989.4e12, 67e12, 4.8e12)),
    ('A100 80GB PCIe', Datasheet(312e12, 19.5e12, 1.935e12)),
    ('A100-SXM4-40GB', Datasheet(312e12, 19.5e12, 1.555e12)),
    ('A100-PCIE-40GB', Datasheet(312e12, 19.5e12, 1.555e12)),
    ('A100', Datasheet(312e12, 19.5e12, 2.039e12)),  # SXM4 80GB
    ('TPU v4 lite', None),
    ('TPU v4', Datasheet(275e12, None, 1.2e12)),
    ('TPU v5 lite', Datasheet(197e12, None, 819e9)),
    ('TPU v5e', Datasheet(197e12, None, 819e9)),
    ('TPU v5', Datasheet(459e12, None, 2.765e12)),  # v5p
    ('TPU v6 lite', Datasheet(918e12, None, 1.64e12)),
    ('TPU v6e', Datasheet(918e12, None, 1.64e12)),
)


def datasheet(device_kind: str) -> Datasheet | None:
  for name, sheet in DATASHEETS:
    if name in device_kind:
      return sheet
  return None


def peak_flops(device_kind: str, dtype) -> float | None:
  """Datasheet FLOP/s of matmuls in `dtype`, or None when unknown.

  The float32 peak is the plain (non-TF32) rate; XLA may run float32
  matmuls as TF32 on NVIDIA GPUs, so float32 utilisation against it can
  pass 100%: the measured matmul is the reference to read there.
  """
  sheet = datasheet(device_kind)
  if sheet is None:
    return None
  dtype = np.dtype(dtype)
  if dtype.itemsize == 2:  # bfloat16, float16
    return sheet.bf16
  return sheet.float32 if dtype == np.float32 else None


def bandwidth(device_kind: str) -> float | None:
  """Datasheet bytes/s of device memory, or None when unknown."""
  sheet = datasheet(device_kind)
  return None if sheet is None else sheet.bandwidth
