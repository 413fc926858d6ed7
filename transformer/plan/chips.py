"""Datasheet figures of the accelerators a plan targets, with their sources.

One table for the plan (`transformer.plan`, keyed by generation: 'v5e') and
the benchmarks (`benchmarks/devices.py`, keyed by what
`jax.devices()[0].device_kind` says: 'TPU v5 lite'). Peak FLOP/s are dense
bfloat16 matmuls (NVIDIA's headline tensor figures are sparse, twice
these); interconnect figures are each chip's bidirectional total over all
its links (ICI for TPUs, NVLink for GPUs), which a step can at best use
fully: they bound collective time from below.
"""

from __future__ import annotations

import dataclasses

GiB = 2**30

# The pages the figures are read from.
_CLOUD_TPU = 'https://cloud.google.com/tpu/docs/'
# Per-link ICI bandwidth (9e10 bytes/s both ways) and 6 links per v4 chip:
# "How to Scale Your Model", part 2 (TPUs); Cloud's v4 page gives no
# per-chip figure.
_SCALING_BOOK = 'https://jax-ml.github.io/scaling-book/tpus/'
_NVIDIA = 'https://www.nvidia.com/en-us/data-center/'


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip's datasheet figures."""
  name: str  # generation as topologies name it: 'v5e', 'h100'
  device_kind: str  # as jax.devices()[0].device_kind says it
  bf16_flops: float  # dense bfloat16 matmul FLOP/s
  hbm_bytes: float | None  # memory capacity; None: varies
  hbm_bandwidth: float | None  # bytes/s; None: varies
  interconnect_bandwidth: float | None  # bytes/s, bidirectional, all links
  float32_flops: float | None = None  # without TF32; None: not published
  source: str = ''


# Topologies name the first six; the rest are variants the benchmarks may
# meet (`for_device_kind`).
CHIPS = (
    Chip('v4', 'TPU v4', 275e12, 32 * GiB, 1200e9, 6 * 90e9,
         source=_CLOUD_TPU + 'v4; ICI: ' + _SCALING_BOOK),
    Chip('v5e', 'TPU v5 lite', 197e12, 16 * GiB, 819e9, 400e9,
         source=_CLOUD_TPU + 'v5e'),
    Chip('v5p', 'TPU v5', 459e12, 95 * GiB, 2765e9, 1200e9,
         source=_CLOUD_TPU + 'v5p'),
    Chip('v6e', 'TPU v6 lite', 918e12, 32 * GiB, 1638e9, 800e9,
         source=_CLOUD_TPU + 'v6e'),
    # SXM parts; NVLink 4: 18 links, 900 GB/s both ways.
    Chip('h100', 'H100', 989.4e12, 80e9, 3.35e12, 900e9, 67e12,
         source=_NVIDIA + 'h100/'),
    Chip('h200', 'H200', 989.4e12, 141e9, 4.8e12, 900e9, 67e12,
         source=_NVIDIA + 'h200/'),
    Chip('h100-pcie', 'H100 PCIe', 756e12, 80e9, 2.0e12, 600e9, 51e12,
         source=_NVIDIA + 'h100/'),
    Chip('h100-nvl', 'H100 NVL', 835e12, 94e9, 3.9e12, 600e9, 60e12,
         source=_NVIDIA + 'h100/'),
    # 96 or 144 GB at 4.0 or 4.9 TB/s: jax's name does not tell which.
    Chip('gh200', 'GH200', 989.4e12, None, None, 900e9, 67e12,
         source=_NVIDIA + 'grace-hopper-superchip/'),
    Chip('h200-nvl', 'H200 NVL', 835e12, 141e9, 4.8e12, 900e9, 60e12,
         source=_NVIDIA + 'h200/'),
    Chip('a100-80gb-pcie', 'A100 80GB PCIe', 312e12, 80e9, 1.935e12, 600e9,
         19.5e12, source=_NVIDIA + 'a100/'),
    Chip('a100-40gb', 'A100-SXM4-40GB', 312e12, 40e9, 1.555e12, 600e9,
         19.5e12, source=_NVIDIA + 'a100/'),
    Chip('a100-40gb-pcie', 'A100-PCIE-40GB', 312e12, 40e9, 1.555e12, 600e9,
         19.5e12, source=_NVIDIA + 'a100/'),
    Chip('a100', 'A100', 312e12, 80e9, 2.039e12, 600e9, 19.5e12,
         source=_NVIDIA + 'a100/'),  # SXM4 80GB
)
# Variants whose figures differ from their family's and are not listed.
_UNLISTED = ('TPU v4 lite',)
BY_NAME = {chip.name: chip for chip in CHIPS}
TPU_GENERATIONS = ('v4', 'v5e', 'v5p', 'v6e')
GPU_GENERATIONS = ('h100', 'h200')


def named(name: str) -> Chip:
  """The chip of a generation a topology names ('v5e'); refuses others,
  listing those known."""
  if name not in TPU_GENERATIONS + GPU_GENERATIONS:
    raise ValueError(f'Unknown accelerator {name!r}; known: '
                     f'{", ".join(TPU_GENERATIONS + GPU_GENERATIONS)}.')
  return BY_NAME[name]


def for_device_kind(device_kind: str) -> Chip | None:
  """The chip `jax.devices()[0].device_kind` names, or None (a CPU, or a
  part not listed)."""
  if any(name in device_kind for name in _UNLISTED):
    return None
  # The longest name that matches: 'H100 PCIe' over 'H100', 'GH200' over
  # 'H200', 'TPU v5 lite' over 'TPU v5'.
  matches = [chip for chip in CHIPS if chip.device_kind in device_kind]
  return max(matches, key=lambda chip: len(chip.device_kind), default=None)
