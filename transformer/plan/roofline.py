"""A lower bound on a step's time from a chip's datasheet: the step can be
no faster than its matmuls at peak FLOP/s, its unavoidable memory traffic
at full HBM bandwidth, or its collectives at the chip's whole interconnect
bandwidth, each with the others perfectly overlapped.

The memory term counts what any schedule must move: every argument read
once, every output written once, and every temporary (the activations kept
for the backward pass, workspace) written and read once.
"""

from __future__ import annotations

import dataclasses

from transformer.plan import chips as chips_lib


@dataclasses.dataclass(frozen=True)
class Roofline:
  """The three terms of a step's bound, in seconds."""
  compute: float
  memory: float
  interconnect: float

  @property
  def bound(self) -> float:
    return max(self.compute, self.memory, self.interconnect)

  @property
  def serial(self) -> float:
    """The terms one after the other, as if nothing overlapped: what tells
    apart plans whose bound is the same compute term."""
    return self.compute + self.memory + self.interconnect

  @property
  def limit(self) -> str:
    """The term that sets the bound."""
    terms = {'compute': self.compute, 'memory': self.memory,
             'interconnect': self.interconnect}
    return max(terms, key=terms.get)


def bound(chip: chips_lib.Chip, *, flops: float, memory_bytes: float,
          link_bytes: float) -> Roofline:
  """The terms for one chip's FLOPs, memory traffic and bytes sent."""
  interconnect = (link_bytes / chip.interconnect_bandwidth
                  if chip.interconnect_bandwidth else 0.0)
  return Roofline(flops / chip.bf16_flops, memory_bytes / chip.hbm_bandwidth,
                  interconnect)


def mfu_ceiling(chip: chips_lib.Chip, model_flops: float,
                seconds: float) -> float:
  """Model FLOP utilisation of a chip doing `model_flops` in `seconds`."""
  return model_flops / (seconds * chip.bf16_flops)
