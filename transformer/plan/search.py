"""`--search`: meshes, remat, micro-batches and Adam's first-moment dtype
tried at the config's global batch, simplest first, each compiled while a
time budget lasts; those that fit, sorted by their step-time bound.

Candidates are config overrides. Before compiling, each is built
(`planner.prepare`: cheap, shapes only) and dropped, with the reason, when
the arrays or the batch do not divide over its mesh, when it would change
the global batch, or when its parameters and optimizer state alone exceed
the chip's memory.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any, Callable

import ml_collections

from transformer import configs
from transformer.plan import planner
from transformer.plan import topology as topology_lib


@dataclasses.dataclass(frozen=True)
class Tried:
  """A candidate: its overrides and its plan, or why it was not compiled."""
  overrides: dict[str, Any]
  plan: planner.Plan | None
  skipped: str = ''

  @property
  def flags(self) -> list[str]:
    return [f'--config.{field}={value}'
            for field, value in self.overrides.items()]


def _divisors(n: int) -> list[int]:
  return [d for d in range(1, n + 1) if n % d == 0]


def meshes(chips: int, chips_per_host: int) -> list[dict[str, int]]:
  """Mesh splits worth trying, fewest collectives first: data parallel,
  fully sharded (FSDP), FSDP within a host and data across hosts, and
  tensor parallelism of 2 and 4 within a host over FSDP."""
  found = [dict(data=chips, fsdp=1, tensor=1),
           dict(data=1, fsdp=chips, tensor=1),
           dict(data=chips // chips_per_host, fsdp=chips_per_host, tensor=1)]
  for tensor in (2, 4):
    if chips_per_host % tensor == 0 and chips % tensor == 0:
      found.append(dict(data=1, fsdp=chips // tensor, tensor=tensor))
  unique = []
  for mesh in found:
    if mesh not in unique:
      unique.append(mesh)
  return unique


def candidates(config: ml_collections.ConfigDict,
               topo: topology_lib.Topology) -> list[dict[str, Any]]:
  """Every combination of `meshes`, remat (where the model has it),
  micro-batches 1, 2, 4 and the first moment's dtype (where Adam's is
  float32), ordered by how much each gives up: recomputation and
  micro-batches cost time, a bfloat16 moment precision."""
  remats = (['none', 'dots', 'full'] if 'remat' in config.model
            else [None])
  moments = (['float32', 'bfloat16'] if config.optimizer.name == 'adam'
             and config.optimizer.mu_dtype == 'float32' else [None])
  found = []
  for (m, mesh), (r, remat), (k, micro), (u, moment) in itertools.product(
      enumerate(meshes(topo.chips, topo.chips_per_host)), enumerate(remats),
      enumerate((1, 2, 4)), enumerate(moments)):
    overrides = {f'mesh.{axis}': size for axis, size in mesh.items()}
    if remat is not None:
      overrides['model.remat'] = remat
    overrides['train.microbatches'] = micro
    if moment is not None:
      overrides['optimizer.mu_dtype'] = moment
    found.append((r + k + u, m, overrides))
  return [overrides for *_, overrides in sorted(found, key=lambda x: x[:2])]


def run(config: ml_collections.ConfigDict,
        topology: str | topology_lib.Topology, *,
        budget_seconds: float, max_candidates: int = 12,
        progress: Callable[[Tried], None] = lambda tried: None
        ) -> list[Tried]:
  """Compiles up to `max_candidates` candidates that pass the checks, in
  `candidates` order, until `budget_seconds` are spent; returns every
  candidate considered (those that fit first, by their bound)."""
  topo = (topology if isinstance(topology, topology_lib.Topology)
          else topology_lib.resolve(topology))
  reference = planner.prepare(config, topo).rows
  capacity = topo.chip.hbm_bytes or float('inf')
  start, tried, compiled = time.perf_counter(), [], 0
  for overrides in candidates(config, topo):
    if compiled >= max_candidates:
      break
    candidate = configs.override(config, overrides)
    try:
      ready = planner.prepare(candidate, topo)
    except ValueError as e:
      tried.append(Tried(overrides, None, str(e).split('. ')[0]))
      continue
    if ready.rows != reference:
      tried.append(Tried(overrides, None, f'batch of {ready.rows} rows, not '
                         f'the config\'s {reference}'))
      continue
    if ready.state_bytes > capacity:
      tried.append(Tried(overrides, None, 'parameters and optimizer state '
                         'alone exceed the chip\'s memory'))
      continue
    if time.perf_counter() - start > budget_seconds:
      tried.append(Tried(overrides, None, 'not compiled: the budget was '
                         'spent'))
      continue
    result = Tried(overrides, planner.plan(ready, search=False))
    compiled += 1
    tried.append(result)
    progress(result)
  return sorted(tried, key=_rank)


def _rank(tried: Tried) -> tuple:
  if tried.plan is None:
    return (2, 0.0)
  if not tried.plan.fits:
    return (1, tried.plan.memory.peak)
  return (0, tried.plan.roofline.bound)


def winner(tried: list[Tried]) -> Tried | None:
  best = tried[0] if tried else None
  return best if best is not None and best.plan is not None and \
      best.plan.fits else None
