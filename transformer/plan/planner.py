"""One plan: an experiment's train step (and its search, for decoding
tasks) lowered and compiled for a topology, read back as memory per chip,
FLOPs, collectives and a bound on the step's time.

Nothing is allocated and no data is read: the task is built `shapes_only`,
the state is `jax.eval_shape`'s, the batch `Task.train_batch_shapes`, each
carrying the `NamedSharding` the config's mesh and axis rules give, over
the topology's compile-only devices.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from typing import Any

import jax
import ml_collections

from transformer import errors
from transformer import optimizers
from transformer import sharding
from transformer import tasks
from transformer import train
from transformer.plan import flops as flops_lib
from transformer.plan import hlo
from transformer.plan import roofline as roofline_lib
from transformer.plan import topology as topology_lib

# A task built shapes_only writes nothing; it is still given a workdir.
_NO_WORKDIR = '/nonexistent/transformer-plan'


@dataclasses.dataclass(frozen=True)
class Memory:
  """Bytes per chip. The state and batch are as their shardings lay them
  out; XLA's figures include the TPU's tile padding."""
  parameters: float
  optimizer: float
  batch: float
  temporaries: float  # activations kept for the backward pass, workspace
  arguments: float  # XLA's: state and batch as the chip holds them
  outputs: float
  aliased: float  # outputs written over their (donated) arguments
  peak: float  # the most live at once
  capacity: float | None  # the chip's HBM

  @property
  def fits(self) -> bool:
    return self.capacity is None or self.peak <= self.capacity


@dataclasses.dataclass(frozen=True)
class Search:
  """The compiled search of a decoding task (`Task.search_program`)."""
  rows: int
  peak: float  # bytes per chip
  compile_seconds: float


@dataclasses.dataclass(frozen=True)
class Plan:
  """What `plan` found (per chip unless said; FLOPs and units a step)."""
  topology: topology_lib.Topology
  mesh: dict[str, int]
  memory: Memory
  model_flops: float  # 3 x the forward pass's matmul FLOPs
  executed_flops: float  # the step's matmuls, recomputation included
  xla_flops: float | None  # XLA's count (a loop's body once)
  xla_bytes: float | None  # XLA's bytes accessed (likewise)
  loops: bool  # the program loops (scanned layers, micro-batches)
  collectives: hlo.Collectives
  roofline: roofline_lib.Roofline
  unit: str  # what units_per_step counts: 'tokens', 'images', ...
  units_per_step: float  # all chips together
  compute_flops: float  # the compute term's: the executed or XLA's count
  memory_traffic: float  # the memory term's bytes (`roofline`)
  rounded: str  # how the batch was rounded to the shards, or ''
  lower_seconds: float
  compile_seconds: float
  search: Search | None
  error: str = ''  # the compiler's refusal, for a program that cannot fit

  @property
  def fits(self) -> bool:
    return not self.error and self.memory.fits

  @property
  def mfu_ceiling(self) -> float:
    return roofline_lib.mfu_ceiling(self.topology.chip, self.model_flops,
                                    self.roofline.bound)

  @property
  def units_per_second_per_chip(self) -> float:
    return self.units_per_step / self.topology.chips / self.roofline.bound


def per_chip_bytes(tree: Any) -> float:
  """Bytes of one device's shard of every array of a tree of
  ShapeDtypeStructs carrying NamedShardings (the largest shard where they
  differ)."""
  total = 0.0
  for leaf in jax.tree.leaves(tree):
    shape = (leaf.sharding.shard_shape(leaf.shape) if leaf.sharding
             is not None else leaf.shape)
    total += math.prod(shape) * leaf.dtype.itemsize
  return total


def _sharded(shapes: dict[str, jax.ShapeDtypeStruct], mesh) -> dict:
  batch = sharding.batch_sharding(mesh)
  return {key: jax.ShapeDtypeStruct(spec.shape, spec.dtype, sharding=batch)
          for key, spec in shapes.items()}


def _units(task, batch: dict[str, jax.ShapeDtypeStruct],
           config: ml_collections.ConfigDict) -> tuple[float, str]:
  """What a step processes in the task's unit (token slots of its
  targets or inputs, else rows: images, pairs, ...), and how the batch
  was rounded up where the shards outnumbered the rows the config asks
  for."""
  rows = next(iter(batch.values())).shape[0]
  tokens = batch.get('targets', batch.get('inputs'))
  if task.unit != 'tokens' or tokens is None or len(tokens.shape) != 2:
    return float(rows), ''
  slots = rows * tokens.shape[1]
  asked = config.data.get('tokens_per_batch')
  rounded = ''
  if asked and slots > asked:
    rounded = (f'tokens_per_batch={asked:,} rounded up to {rows:,} rows of '
               f'{tokens.shape[1]:,} ({slots:,} token slots): every '
               f'data-parallel shard and micro-batch takes whole rows')
  return float(slots), rounded


def _check_rows(shapes: dict[str, jax.ShapeDtypeStruct], divisor: int,
                mesh) -> None:
  rows = next(iter(shapes.values())).shape[0]
  if rows % divisor:
    raise ValueError(
        f'A batch of {rows} rows does not split over the data-parallel '
        f'axes times the micro-batches ({divisor}: mesh '
        f'{dict(mesh.shape)}): change the batch size or config.mesh.')


# XLA's TPU compiler refuses a program that cannot fit: "Ran out of memory
# in memory space hbm. Used 20.51G of 15.75G hbm." (all it needs), or
# "...required for HLO temporaries (95.29G) exceeds available HBM" (what
# comes on top of the arguments).
_USED = re.compile(r'Used ([\d.]+)([KMGT]) of [\d.]+[KMGT] hbm')
_TEMPORARIES = re.compile(r'HLO temporaries \(([\d.]+)([KMGT])\)')
_UNITS = {'K': 2**10, 'M': 2**20, 'G': 2**30, 'T': 2**40}


def _compile(lowered) -> tuple[Any, str, tuple[str, float] | None]:
  """(compiled or None, the refusal, what it said it needed: ('total' or
  'temporaries', bytes)). A compile-only program cannot be read back
  from JAX's persistent compilation cache: it stays out of it."""
  cached = jax.config.jax_enable_compilation_cache
  jax.config.update('jax_enable_compilation_cache', False)
  try:
    return lowered.compile(), '', None
  except Exception as e:  # pylint: disable=broad-except
    text = str(e)
    if 'RESOURCE_EXHAUSTED' not in text and 'Ran out of memory' not in text:
      raise
    used, temporaries = _USED.search(text), _TEMPORARIES.search(text)
    needed = None
    if used:
      needed = ('total', float(used.group(1)) * _UNITS[used.group(2)])
    elif temporaries:
      needed = ('temporaries',
                float(temporaries.group(1)) * _UNITS[temporaries.group(2)])
    first = next((line for line in text.splitlines() if 'memory' in line),
                 errors.first_line(text))
    return None, first.strip()[:300], needed
  finally:
    jax.config.update('jax_enable_compilation_cache', cached)


def _memory(compiled, abstract, batch, capacity, needed) -> Memory:
  parameters = per_chip_bytes(abstract.params)
  optimizer = per_chip_bytes(abstract.opt_state)
  batch_bytes = per_chip_bytes(batch)
  if compiled is None:  # refused: what the compiler said it needed
    held = parameters + optimizer + batch_bytes
    kind, value = needed or ('total', held)
    temporaries = value if kind == 'temporaries' else max(value - held, 0.0)
    return Memory(parameters, optimizer, batch_bytes, temporaries, held, 0.0,
                  0.0, held + temporaries, capacity)
  stats = compiled.memory_analysis()
  arguments, outputs = stats.argument_size_in_bytes, stats.output_size_in_bytes
  aliased, temporaries = stats.alias_size_in_bytes, stats.temp_size_in_bytes
  peak = _peak(stats)
  return Memory(parameters, optimizer, batch_bytes, temporaries, arguments,
                outputs, aliased, peak, capacity)


def _peak(stats) -> float:
  """The larger of XLA's peak (TPUs report one) and everything held at
  once: arguments, outputs not written over them, temporaries."""
  held = (stats.argument_size_in_bytes + stats.output_size_in_bytes
          - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
  return max(getattr(stats, 'peak_memory_in_bytes', 0), held)


def _xla_costs(compiled) -> tuple[float | None, float | None]:
  costs = compiled.cost_analysis() if compiled is not None else None
  if isinstance(costs, list):  # older jax: one dict per program
    costs = costs[0] if costs else None
  if not costs:
    return None, None
  return costs.get('flops'), costs.get('bytes accessed')


def search_of(ready: Prepared) -> Search | None:
  """The decoding search of a prepared plan compiled alone (for a
  `--search` winner, whose step is compiled already)."""
  return _search(ready.task, ready.steps.abstract, ready.mesh, ready.rules)


def _search(task, abstract, mesh, rules) -> Search | None:
  program = task.search_program()
  if program is None:
    return None
  search, arrays = program
  arrays = {key: jax.ShapeDtypeStruct(
      spec.shape, spec.dtype, sharding=sharding.batch_sharding(mesh)
      if spec.shape else jax.sharding.NamedSharding(
          mesh, jax.sharding.PartitionSpec()))
            for key, spec in arrays.items()}
  start = time.perf_counter()
  with sharding.active(mesh, rules):
    lowered = jax.jit(lambda params, kwargs: search(params, **kwargs)).lower(
        abstract.params, arrays)
  compiled, _, needed = _compile(lowered)
  seconds = time.perf_counter() - start
  rows = next(spec.shape[0] for spec in arrays.values() if spec.shape)
  if compiled is None:
    return Search(rows, needed[1] if needed else math.inf, seconds)
  return Search(rows, _peak(compiled.memory_analysis()), seconds)


@dataclasses.dataclass(frozen=True)
class Prepared:
  """Everything of a plan but the compiling (`prepare`)."""
  config: ml_collections.ConfigDict
  topology: topology_lib.Topology
  mesh: Any
  rules: Any
  task: Any
  steps: train.Steps
  batch: dict[str, jax.ShapeDtypeStruct]

  @property
  def rows(self) -> int:
    return next(iter(self.batch.values())).shape[0]

  @property
  def state_bytes(self) -> float:
    """Parameters and optimizer state per chip: what must fit first."""
    return (per_chip_bytes(self.steps.abstract.params)
            + per_chip_bytes(self.steps.abstract.opt_state))


def prepare(config: ml_collections.ConfigDict,
            topology: str | topology_lib.Topology) -> Prepared:
  """The task, mesh, abstract state and batch of `config` on `topology`
  (a name, 'v5e:16x16', or resolved), refusing, before anything compiles,
  a config that cannot train, a mesh the chips or arrays do not divide
  and a batch the data axes do not."""
  train.check_config(config)
  topo = (topology if isinstance(topology, topology_lib.Topology)
          else topology_lib.resolve(topology))
  mesh = sharding.make_mesh(config.mesh.to_dict(), topo.devices)
  rules = sharding.rules_from_config(config.axis_rules)
  divisor = sharding.batch_divisor(mesh) * config.train.microbatches
  task = tasks.build(config, _NO_WORKDIR, batch_divisor=divisor,
                     shapes_only=True)
  tx, _ = optimizers.build(
      config.optimizer, config.train.num_steps,
      adapters_only=bool(config.model.get('lora_rank', 0)))
  steps = train.jit_steps(config, task, tx, mesh, rules)
  shapes = task.train_batch_shapes()
  _check_rows(shapes, divisor, mesh)
  return Prepared(config, topo, mesh, rules, task, steps,
                  _sharded(shapes, mesh))


def plan(config: ml_collections.ConfigDict | Prepared,
         topology: str | topology_lib.Topology | None = None, *,
         search: bool = True) -> Plan:
  """The plan of `config` on `topology` (`prepare`; or a `Prepared`);
  with `search`, the decoding tasks' search is compiled too."""
  ready = config if isinstance(config, Prepared) else prepare(config,
                                                              topology)
  topo, mesh, rules, task, steps, batch = (
      ready.topology, ready.mesh, ready.rules, ready.task, ready.steps,
      ready.batch)
  key = jax.eval_shape(jax.random.key, 0)

  start = time.perf_counter()
  with sharding.active(mesh, rules):
    traced = steps.train_step.trace(steps.abstract, batch)
    forward = jax.jit(lambda p, b, r: task.loss(
        p, b, r, deterministic=False)).trace(steps.abstract.params, batch,
                                             key)
    lowered = traced.lower()
  lower_seconds = time.perf_counter() - start
  compiled, error, needed = _compile(lowered)
  compile_seconds = time.perf_counter() - start - lower_seconds

  chips = topo.chips
  memory = _memory(compiled, steps.abstract, batch, topo.memory, needed)
  executed = flops_lib.traced_flops(traced) / chips
  xla_flops, xla_bytes = _xla_costs(compiled)
  text = compiled.as_text() if compiled is not None else ''
  collectives = hlo.collectives(text, chips)
  traffic = memory.arguments + memory.outputs + 2 * memory.temporaries
  compute = max(executed, xla_flops or 0.0)
  bound = roofline_lib.bound(topo.chip, flops=compute, memory_bytes=traffic,
                             link_bytes=collectives.total_link_bytes)
  units, rounded = _units(task, batch, ready.config)
  return Plan(
      topology=topo, mesh=dict(mesh.shape), memory=memory,
      model_flops=3 * flops_lib.traced_flops(forward) / chips,
      executed_flops=executed, xla_flops=xla_flops, xla_bytes=xla_bytes,
      loops=' while(' in text, collectives=collectives, roofline=bound,
      unit=task.unit, units_per_step=units, compute_flops=compute,
      memory_traffic=traffic, rounded=rounded, lower_seconds=lower_seconds,
      compile_seconds=compile_seconds,
      search=(_search(task, steps.abstract, mesh, rules)
              if search and compiled is not None else None),
      error=error)
