"""Topologies a plan compiles for: 'v5e:16x16' (256 v5e chips), 'v4:2x2x4',
'v5p:4x4x4', 'v6e:8x8'; and GPUs, 'h100:8' (one host of 8) or 'h200:8x2'
(2 hosts of 8).

TPU topologies come from XLA's TPU compiler in libtpu
(`jax.experimental.topologies`): compile-only devices, laid out as the
slice's chips and hosts, that need no TPU. GPU topologies come from jax's
CUDA plugin with a target description of the card (`GPU_PLUGIN` installs
it, without CUDA's own libraries, which a compile that makes no GPU code
does not need): XLA's GPU compiler then plans the sharded program and its
memory, though not its kernels' tiling, which it tunes on a real GPU.
Without the plugin, a GPU topology is as many CPU devices standing in
(`simulated`): the same sharded program, compiled for the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from typing import Any

from transformer import errors
from transformer.plan import chips

INSTALL = 'pip install -e ".[tpu]"'
# In a venv of its own: the plugin logs to stderr at every jax start.
GPU_PLUGIN = ('pip install --no-deps jax-cuda12-plugin==0.10.2 '
              'jax-cuda12-pjrt==0.10.2')
# What libtpu reads when it starts; on a machine without a TPU, unset, it
# logs a dozen lines of warnings on stderr. The compile-only topology
# ignores them. A real TPU VM sets its own, which are kept. Without the
# last, libtpu takes a lock file that one process at a time may hold:
# plans compile for no device, so several may run at once (tests in
# parallel, a plan beside a search).
_LIBTPU_QUIET = {'TPU_SKIP_MDS_QUERY': '1', 'TPU_WORKER_HOSTNAMES': 'localhost',
                 'TPU_ACCELERATOR_TYPE': 'v5litepod-4',
                 'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'}
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
  def memory(self) -> float | None:
    """Bytes a run may use on each chip: a TPU's HBM, or the share of a
    GPU's that jax takes (XLA_PYTHON_CLIENT_MEM_FRACTION, 75% unless set)."""
    if self.chip.hbm_bytes is None or self.chip.name in chips.TPU_GENERATIONS:
      return self.chip.hbm_bytes
    return self.chip.hbm_bytes * gpu_memory_fraction()

  @property
  def dims(self) -> str:
    """The slice's shape as GKE and gcloud spell it: '16x16'."""
    return self.name.partition(':')[2]


def gpu_memory_fraction() -> float:
  """The share of a GPU's memory jax preallocates and works in."""
  return float(os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.75'))


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
    return _gpu(name, chip, dims)
  if not libtpu_installed():
    raise ValueError(f'Compiling for {name} needs libtpu, the TPU '
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
                     f'({errors.first_line(e, 200)}). Slices are e.g. '
                     f'{EXAMPLES}.') from None
  devices = tuple(description.devices)
  hosts = len({device.process_index for device in devices})
  return Topology(name, chip, devices, hosts, simulated=False)


def simulated_device_count(name: str) -> int | None:
  """CPU devices a GPU topology needs where no CUDA plugin compiles for it
  (None otherwise): the command sets them up (XLA_FLAGS) before jax starts
  its CPU backend."""
  chip, dims = parse(name)
  if chip.name in chips.GPU_GENERATIONS and not gpu_plugin_installed():
    return math.prod(dims)
  return None


# XLA's description of a card (stream_executor's GpuTargetConfigProto): what
# it compiles for in place of a device it would query. Hopper: 132 SMs.
_GPU_TARGET = """gpu_device_info {{
  threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472
  threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: {bandwidth}
  l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: {memory} shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }}
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 7 }}
runtime_version {{ major: 12 minor: 8 }}
device_description_str: "{description}"
"""
_DESCRIPTIONS = {'h100': 'NVIDIA H100 80GB HBM3', 'h200': 'NVIDIA H200'}


def gpu_plugin_installed() -> bool:
  # find_spec of a dotted name raises when the parent package is absent.
  if importlib.util.find_spec('jax_plugins') is None:
    return False
  return importlib.util.find_spec('jax_plugins.xla_cuda12') is not None


def _gpu(name: str, chip: chips.Chip, dims: tuple[int, ...]) -> Topology:
  """Compile-only GPUs from jax's CUDA plugin, else CPU stand-ins."""
  per_host, hosts = dims[0], (dims[1] if len(dims) > 1 else 1)
  if not gpu_plugin_installed():
    return _simulated(name, chip, dims)
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  target = _GPU_TARGET.format(
      bandwidth=int(chip.hbm_bandwidth), memory=int(chip.hbm_bytes),
      description=_DESCRIPTIONS[chip.name])
  try:
    description = topologies.get_topology_desc(
        platform='cuda', topology=f'1x{hosts}x{per_host}',
        target_config=target)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(
        f'--topology={name}: the CUDA plugin did not describe it '
        f'({errors.first_line(e, 200)}); it compiles without a GPU only '
        f'with JAX_PLATFORMS=cpu, which transformer-plan sets.') from None
  return Topology(name, chip, tuple(description.devices), hosts,
                  simulated=False)


def _simulated(name: str, chip: chips.Chip, dims: tuple[int, ...]
               ) -> Topology:
  import jax  # pylint: disable=g-import-not-at-top
  count = math.prod(dims)
  devices = jax.devices('cpu')
  if len(devices) < count:
    raise ValueError(
        f'--topology={name} stands {count} CPU devices in for the GPUs, but '
        f'jax has {len(devices)}: start with XLA_FLAGS='
        f'--xla_force_host_platform_device_count={count} (transformer-plan '
        f'does this itself when it is the first to start jax).')
  return Topology(name, chip, tuple(devices[:count]),
                  hosts=dims[1] if len(dims) > 1 else 1, simulated=True)
