"""Topologies a plan compiles for: 'v5e:16x16' (256 v5e chips), 'v4:2x2x4',
'v5p:4x4x4', 'v6e:8x8'; and GPUs, 'h100:8' (one host of 8) or 'h200:8x2'
(2 hosts of 8).

TPU topologies come from XLA's TPU compiler in libtpu
(`jax.experimental.topologies`): compile-only devices, laid out as the
slice's chips and hosts, that need no TPU. JAX cannot yet compile for a
CUDA target without a GPU present, so a GPU topology is as many CPU
devices standing in (`simulated`): the program and its per-device memory
are the same sharded program's, on the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from typing import Any

from transformer.plan import chips

INSTALL = 'pip install -e ".[tpu]"'
# What libtpu reads when it starts; on a machine without a TPU, unset, it
# logs a dozen lines of warnings on stderr. The compile-only topology
# ignores them. A real TPU VM sets its own, which are kept.
_LIBTPU_QUIET = {'TPU_SKIP_MDS_QUERY': '1', 'TPU_WORKER_HOSTNAMES': 'localhost',
                 'TPU_ACCELERATOR_TYPE': 'v5litepod-4'}
# v4 and v5p chips have two TensorCores that XLA drives as one device.
_MEGACORE = ('v4', 'v5p')
EXAMPLES = 'v5e:16x16, v4:2x2x4, v5p:4x4x4, v6e:8x8, h100:8, h200:8x2'


@dataclasses.dataclass(frozen=True)
class Topology:
  """A named topology and the devices a mesh over it is made of."""
  name: str  # as given: 'v5e:16x16'
  chip: chips.Chip
  devices: tuple[Any, ...]  # compile-only TPU devices, or CPU stand-ins
  hosts: int
  simulated: bool  # CPU devices standing in for GPUs

  @property
  def chips(self) -> int:
    return len(self.devices)

  @property
  def chips_per_host(self) -> int:
    return self.chips // self.hosts

  @property
  def dims(self) -> str:
    """The slice's shape as GKE and gcloud spell it: '16x16'."""
    return self.name.partition(':')[2]


def parse(name: str) -> tuple[chips.Chip, tuple[int, ...]]:
  """(chip, shape) of 'v5e:16x16'; refuses other spellings and unknown
  generations before anything is compiled, listing the known ones."""
  generation, colon, shape = name.partition(':')
  if not colon or not re.fullmatch(r'[1-9]\d*(x[1-9]\d*)*', shape):
    raise ValueError(f'--topology={name!r} is not GENERATION:SHAPE; e.g. '
                     f'{EXAMPLES}.')
  chip = chips.named(generation.lower())
  dims = tuple(int(d) for d in shape.split('x'))
  if chip.name in chips.GPU_GENERATIONS and len(dims) > 2:
    raise ValueError(f'--topology={name!r}: a GPU topology is '
                     f'{chip.name}:GPUS_PER_HOST[xHOSTS], e.g. '
                     f'{chip.name}:8x2.')
  return chip, dims


def libtpu_installed() -> bool:
  return importlib.util.find_spec('libtpu') is not None


def resolve(name: str) -> Topology:
  """The devices of topology `name` (`parse`). TPU topologies need libtpu
  (refused, naming the install command, without it); GPU ones take CPU
  devices, which must have been made before jax started its CPU backend
  (`simulated_device_count`)."""
  chip, dims = parse(name)
  if chip.name in chips.GPU_GENERATIONS:
    return _simulated(name, chip, dims)
  if not libtpu_installed():
    raise RuntimeError(f'Compiling for {name} needs libtpu, the TPU '
                       f'compiler (no TPU needed): {INSTALL}')
  for key, value in _LIBTPU_QUIET.items():
    os.environ.setdefault(key, value)
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    description = topologies.get_topology_desc(
        topology_name=f'{chip.name}:{"x".join(map(str, dims))}',
        platform='tpu',
        chip_config_name='megacore' if chip.name in _MEGACORE else 'default')
  except Exception as e:  # libtpu's own message says which shapes exist
    raise ValueError(f'--topology={name}: libtpu has no such slice '
                     f'({str(e).splitlines()[0][:200]}). Slices are e.g. '
                     f'{EXAMPLES}.') from None
  devices = tuple(description.devices)
  hosts = len({device.process_index for device in devices})
  return Topology(name, chip, devices, hosts, simulated=False)


def simulated_device_count(name: str) -> int | None:
  """CPU devices a GPU topology needs (None for TPU ones): the command sets
  them up (XLA_FLAGS) before jax starts its CPU backend."""
  chip, dims = parse(name)
  return math.prod(dims) if chip.name in chips.GPU_GENERATIONS else None


def _simulated(name: str, chip: chips.Chip, dims: tuple[int, ...]
               ) -> Topology:
  import jax  # pylint: disable=g-import-not-at-top
  count = math.prod(dims)
  devices = jax.devices('cpu')
  if len(devices) < count:
    raise RuntimeError(
        f'--topology={name} stands {count} CPU devices in for the GPUs, but '
        f'jax has {len(devices)}: start with XLA_FLAGS='
        f'--xla_force_host_platform_device_count={count} (transformer-plan '
        f'does this itself when it is the first to start jax).')
  return Topology(name, chip, tuple(devices[:count]),
                  hosts=dims[1] if len(dims) > 1 else 1, simulated=True)
