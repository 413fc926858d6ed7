"""`--search`: meshes, remat, micro-batches and Adam's first-moment dtype
tried at the config's global batch (as each mesh rounds it to whole rows
a shard, never above what the config's own mesh gives), each compiled
while a time budget lasts; those that fit, sorted by their bound on the
time per token (or image).

Each mesh (`meshes`) climbs a ladder of memory savers (`ladder`), from
none to all, and stops at the first rung that fits: the rungs above it
only add recomputation, micro-batches or lost precision. Candidates are
config overrides. Before compiling, each is built (`planner.prepare`:
cheap, shapes only) and dropped, with the reason, when the arrays or the
batch do not divide over its mesh, when it would change the global batch,
or when its parameters and optimizer state alone exceed the chip's memory.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import ml_collections

from transformer import errors
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


def ladder(config: ml_collections.ConfigDict) -> list[dict[str, Any]]:
  """Memory savers in the order a mesh tries them, each giving up more:
  recompute dots, recompute all (where the model has remat), then 2 and 4
  micro-batches; then Adam's first moment in bfloat16 (where it is
  float32), alone and with 4 micro-batches (the only rungs that shrink
  the optimizer state)."""
  remats = ['none', 'dots', 'full'] if 'remat' in config.model else [None]
  rungs = [{'model.remat': remat} if remat else {} for remat in remats]
  last = rungs[-1]
  rungs += [{**last, 'train.microbatches': micro} for micro in (2, 4)]
  if (config.optimizer.name == 'adam'
      and config.optimizer.mu_dtype == 'float32'):
    rungs += [{**last, 'train.microbatches': micro,
               'optimizer.mu_dtype': 'bfloat16'} for micro in (1, 4)]
  return [{'train.microbatches': 1, **rung} for rung in rungs]


def candidates(config: ml_collections.ConfigDict,
               topo: topology_lib.Topology) -> list[dict[str, Any]]:
  """For each of `meshes`, the rungs of its `ladder`; meshes whose
  parameters and optimizer state take more than half a chip's memory
  last (what is left for activations rarely holds a step)."""
  def crowded(mesh: dict[str, int]) -> bool:
    try:
      ready = planner.prepare(configs.override(config, _mesh(mesh)), topo)
    except ValueError:
      return True
    return ready.state_bytes > (topo.memory or float('inf')) / 2
  ordered = sorted(meshes(topo.chips, topo.chips_per_host), key=crowded)
  return [{**_mesh(mesh), **rung} for mesh in ordered
          for rung in ladder(config)]


def _mesh(mesh: dict[str, int]) -> dict[str, int]:
  return {f'mesh.{axis}': size for axis, size in mesh.items()}


def run(config: ml_collections.ConfigDict,
        topology: str | topology_lib.Topology, *,
        budget_seconds: float, max_candidates: int = 12,
        progress: Callable[[Tried], None] = lambda tried: None
        ) -> list[Tried]:
  """For each mesh, compiles the rungs of its ladder until one fits (the
  fastest that fits on that mesh: later rungs only add recomputation,
  micro-batches or precision loss), while `budget_seconds` and
  `max_candidates` compiles last; returns every candidate considered,
  those that fit first, by their bound."""
  topo = (topology if isinstance(topology, topology_lib.Topology)
          else topology_lib.resolve(topology))
  # The most rows the config's batch comes to: as asked, or as its own
  # mesh rounds it up. A candidate's shards may round it down by less
  # than a row each, never up beyond it.
  reference = max(planner.prepare(config, topo).rows, _asked_rows(config))
  start, tried, compiled = time.perf_counter(), [], 0
  rungs = len(ladder(config))
  options = candidates(config, topo)
  for first in range(0, len(options), rungs):
    for overrides in options[first:first + rungs]:
      ready, reason = _prepared(config, overrides, topo, reference)
      if ready is not None and (compiled >= max_candidates or
                                time.perf_counter() - start > budget_seconds):
        ready, reason = None, 'not compiled: the budget was spent'
      if ready is None:
        tried.append(Tried(overrides, None, reason))
        if reason.startswith(('batch', 'parameters')):
          continue  # a later rung may divide it, or hold less state
        break  # the mesh itself cannot serve
      try:
        result = Tried(overrides, planner.plan(ready, search=False))
      except Exception as e:  # pylint: disable=broad-except
        # One candidate the compiler rejects ends neither the search nor
        # the mesh's other rungs.
        tried.append(Tried(overrides, None, 'the compiler failed: ' +
                           errors.first_line(e, 200)))
        continue
      compiled += 1
      tried.append(result)
      progress(result)
      if result.plan.fits:
        break  # the next rungs on this mesh are only slower
  return sorted(tried, key=_rank)


def _asked_rows(config: ml_collections.ConfigDict) -> int:
  """The rows a step's batch has before any mesh rounds it."""
  data = config.data
  if data.get('tokens_per_batch') and data.get('max_length'):
    return max(1, data.batch_rows if data.get('batch_rows') else
               data.tokens_per_batch // data.max_length)
  return data.get('batch_size', 0)


def _prepared(config, overrides, topo, reference: int
              ) -> tuple[planner.Prepared | None, str]:
  """A candidate built, or why it cannot be compiled at the config's
  batch."""
  try:
    ready = planner.prepare(configs.override(config, overrides), topo)
  except ValueError as e:
    return None, str(e).split('. ')[0]
  if ready.rows > reference:
    return None, (f'batch of {ready.rows} rows, more than the config\'s '
                  f'{reference}')
  if ready.state_bytes > (topo.memory or float('inf')):
    return None, ('parameters and optimizer state alone exceed the chip\'s '
                  'memory')
  return ready, ''


def _rank(tried: Tried) -> tuple:
  if tried.plan is None:
    return (2, 0.0)
  if not tried.plan.fits:
    return (1, tried.plan.memory.peak)
  # By time per token (or image): shards may round the batch differently.
  units = tried.plan.units_per_step
  return (0, tried.plan.roofline.bound / units,
          tried.plan.roofline.serial / units)


def changed(config: ml_collections.ConfigDict,
            overrides: dict[str, Any]) -> list[str]:
  """The flags of `overrides` that change `config`: what to paste."""
  flags = []
  for field, value in overrides.items():
    node = config
    for part in field.split('.'):
      node = node.get(part) if hasattr(node, 'get') else None
    if node != value:
      flags.append(f'--config.{field}={value}')
  return flags


def winner(tried: list[Tried]) -> Tried | None:
  best = tried[0] if tried else None
  return best if best is not None and best.plan is not None and \
      best.plan.fits else None
