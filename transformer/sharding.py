"""Device mesh, logical axis rules, and the shardings derived from them.

Models name their parameter and activation axes logically ('batch', 'embed',
'heads', ...); the config maps those names to mesh axes ('data', 'fsdp',
'tensor'). Changing parallelism means changing the config, not the model.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Callable, Iterator, Sequence

from absl import logging
import flax.linen as nn
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
import numpy as np
import optax

MESH_AXES = ('data', 'fsdp', 'tensor')
# Mesh axes that split the batch: every batch dimension is sharded over them.
BATCH_AXES = ('data', 'fsdp')


def make_mesh(shape: dict[str, int],
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A mesh over all devices with the named axes of `shape`.

  Args:
    shape: axis name -> size for each of MESH_AXES; one size may be -1,
      meaning all remaining devices (e.g. {'data': -1, 'fsdp': 1,
      'tensor': 1} is pure data parallelism on any number of devices).
    devices: defaults to `jax.devices()` (all processes).
  """
  devices = list(jax.devices() if devices is None else devices)
  unknown = set(shape) - set(MESH_AXES)
  if unknown:
    raise ValueError(f'Unknown mesh axes {sorted(unknown)} in config.mesh; '
                     f'use {MESH_AXES}.')
  sizes = [int(shape.get(axis, 1)) for axis in MESH_AXES]
  if sizes.count(-1) > 1:
    raise ValueError(f'Only one mesh axis may be -1, got {dict(shape)}.')
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(
          f'config.mesh {dict(shape)}: {len(devices)} devices are not '
          f'divisible by the fixed axes ({known}).')
    sizes[sizes.index(-1)] = len(devices) // known
  if math.prod(sizes) != len(devices):
    raise ValueError(
        f'config.mesh {dict(zip(MESH_AXES, sizes))} needs '
        f'{math.prod(sizes)} devices but {len(devices)} are available; '
        f'set one axis to -1 to use all devices.')
  # jax.make_mesh orders devices by process and, on TPUs, by the physical
  # torus, with the last axis (tensor) fastest: tensor groups are neighbours.
  try:
    mesh = jax.make_mesh(tuple(sizes), MESH_AXES,
                         axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)
  except NotImplementedError as e:  # a TPU slice's torus: sides it cannot cut
    raise ValueError(
        f'config.mesh {dict(zip(MESH_AXES, sizes))} does not map onto the '
        f'physical layout of these {len(devices)} devices ({e}). Give each '
        f'mesh axis a size that is a product of the slice\'s sides.'
    ) from None
  groups = mesh.devices.reshape(-1, mesh.shape['tensor'])
  if any(len({d.process_index for d in group}) > 1 for group in groups):
    logging.warning(
        'config.mesh tensor=%d spans hosts: every layer then exchanges '
        'activations over the slower inter-host network. Use at most %d '
        '(the devices of one host) and fsdp or data for the rest.',
        mesh.shape['tensor'], sum(d.process_index == devices[0].process_index
                                  for d in devices))
  return mesh


def rules_from_config(rules: Any) -> tuple[tuple[str, Any], ...]:
  """Config rules (a sequence of [logical, mesh axis or list or None])."""
  return tuple((str(logical), tuple(mesh) if isinstance(mesh, (list, tuple))
                else mesh) for logical, mesh in rules)


@contextlib.contextmanager
def active(mesh: Mesh, rules: Sequence[tuple[str, Any]]) -> Iterator[None]:
  """Mesh and rules in effect, so `nn.with_logical_constraint` applies."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield


def logical_shardings(boxed_tree: Any, mesh: Mesh,
                      rules: Sequence[tuple[str, Any]]) -> Any:
  """NamedShardings for a tree of `nn.LogicallyPartitioned` leaves.

  Unboxed leaves (e.g. the step counter or optimizer scalars) are
  replicated.
  """
  specs = nn.get_partition_spec(boxed_tree)
  # optax's MaskedNode (the state of parameters an optimizer leaves out,
  # e.g. the frozen weights beside low-rank adapters) is an empty tuple,
  # which flax would read as a partition spec: it stays an empty node.
  masked = lambda x: isinstance(x, optax.MaskedNode)
  return jax.tree.map(
      lambda spec: spec if masked(spec) else nn.logical_to_mesh_sharding(
          spec, mesh, rules), specs,
      is_leaf=lambda x: masked(x) or isinstance(x, PartitionSpec))


def check_divisible(shapes: Any, shardings: Any) -> None:
  """Refuses, before compiling, arrays whose sharded dimensions the mesh
  does not divide, naming each array, its shape and the axes."""
  problems = []

  def check(path, shape, sharding):
    if not isinstance(sharding, NamedSharding):
      return
    for size, axes in zip(shape.shape, sharding.spec):
      axes = () if axes is None else (axes,) if isinstance(axes, str) \
          else axes
      parts = math.prod(sharding.mesh.shape[a] for a in axes)
      if size % parts:
        problems.append(f'{jax.tree_util.keystr(path)} {shape.shape} '
                        f'dimension {size} over {axes} ({parts} shards)')

  jax.tree_util.tree_map_with_path(check, shapes, shardings)
  if problems:
    raise ValueError(
        'The mesh does not divide these arrays: ' + '; '.join(problems) +
        '. Change config.mesh, the model size, or map the logical axis to '
        'None in config.axis_rules.')


def sharded_init(init: Callable[[jax.Array], Any], rng: jax.Array,
                 mesh: Mesh, rules: Sequence[tuple[str, Any]]
                 ) -> tuple[Callable[[], Any], Any]:
  """Sharded initialisation: eval_shape -> logical specs -> shardings ->
  jit(init, out_shardings), so arrays are created already sharded and never
  gathered on one device.

  Args:
    init: rng -> a tree whose leaves may be `nn.LogicallyPartitioned`.
    rng: its key.
    mesh, rules: where the logical axes go.

  Returns:
    A function that creates the tree, and the abstract tree
    (ShapeDtypeStructs carrying the shardings, for restoring).
  """
  boxed = jax.eval_shape(init, rng)
  shardings = logical_shardings(boxed, mesh, rules)
  initialise = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=shardings)
  # Plain unboxing: outside jit there is nothing to constrain.
  unboxed = jax.tree.map(
      lambda x: x.unbox(apply_constraint=False)
      if isinstance(x, nn.LogicallyPartitioned) else x, boxed,
      is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  check_divisible(unboxed, shardings)
  abstract = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      unboxed, shardings)
  return functools.partial(initialise, rng), abstract


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) axis split over the data-parallel mesh axes."""
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def batch_divisor(mesh: Mesh) -> int:
  """The global batch size must be a multiple of this."""
  return int(np.prod([mesh.shape[axis] for axis in BATCH_AXES]))


class HostRows(dict):
  """A batch holding only this process's rows of a global batch of
  `global_rows` rows (an input pipeline that reads per host yields these;
  plain dicts are whole global batches)."""

  def __init__(self, arrays: dict[str, np.ndarray], global_rows: int):
    super().__init__(arrays)
    self.global_rows = global_rows


def host_rows(mesh: Mesh, global_rows: int) -> slice:
  """The rows of a global batch that this process's devices hold.

  Batches are split over the data-parallel axes; with the device order of
  `make_mesh` (processes major, tensor axis fastest) each process holds one
  contiguous block, the same for processes that share a data shard.
  """
  indices = batch_sharding(mesh).addressable_devices_indices_map(
      (global_rows,))
  starts = {index[0].indices(global_rows)[:2] for index in indices.values()}
  start = min(a for a, _ in starts)
  stop = max(b for _, b in starts)
  if sum(b - a for a, b in starts) != stop - start:
    raise ValueError(
        f'This process holds non-contiguous rows {sorted(starts)} of the '
        f'batch under mesh {dict(mesh.shape)}: lay the mesh out so that '
        f'each host holds whole data shards (tensor axis within a host).')
  return slice(start, stop)


def global_batch(batch: dict[str, np.ndarray], mesh: Mesh
                 ) -> dict[str, jax.Array]:
  """Global arrays, batch axis split over the data-parallel axes.

  Args:
    batch: a whole global batch (every process passes the same one; each
      keeps only the rows of its devices), or `HostRows` (each process
      passes its own rows, `host_rows(mesh, batch.global_rows)`).
    mesh: the device mesh.
  """
  sharding = batch_sharding(mesh)
  if isinstance(batch, HostRows):
    rows, local = batch.global_rows, batch
    block, fed = host_rows(mesh, rows), len(next(iter(batch.values())))
    if block.stop - block.start != fed:
      raise ValueError(
          f'This process feeds {fed} rows but its devices hold rows '
          f'{block.start}:{block.stop} of the global batch of {rows} under '
          f'mesh {dict(mesh.shape)}. Per-host input splits every batch '
          f'evenly over the processes: keep the fsdp and tensor axes within '
          f'a host so that each process holds rows of its own.')
  else:
    if jax.process_count() == 1:
      # The whole batch is this process's: one transfer of every array
      # (a training loop's per-step host time, docs/benchmarks.md).
      return jax.device_put(dict(batch), sharding)
    rows = len(next(iter(batch.values())))
    block = host_rows(mesh, rows)
    local = {key: value[block] for key, value in batch.items()}
  return {
      key: jax.make_array_from_process_local_data(
          sharding, value, (rows, *value.shape[1:]))
      for key, value in local.items()
  }
