"""The bytes a plan says each chip holds against the bytes a real state
occupies on each of 8 simulated CPU devices, with the same mesh. Run by
tests/plan/test_plan_command.py:

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python tests/plan/planned_state.py WORKDIR

Prints one JSON object per mesh.
"""

import json
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from sharded_steps import experiment  # pylint: disable=wrong-import-position
from transformer import configs  # pylint: disable=wrong-import-position
from transformer import train  # pylint: disable=wrong-import-position
from transformer.plan import planner  # pylint: disable=wrong-import-position

MESHES = ({'mesh.data': 1, 'mesh.fsdp': 4, 'mesh.tensor': 2},
          {'mesh.data': 2, 'mesh.fsdp': 2, 'mesh.tensor': 2})


def held(tree) -> int:
  """Bytes of the largest shard each array has on one device."""
  return sum(max(shard.data.nbytes for shard in leaf.addressable_shards)
             for leaf in jax.tree.leaves(tree))


def main(workdir: str) -> None:
  for mesh in MESHES:
    config = configs.override(experiment('gpt'), mesh)
    state = train.Trainer(config, workdir).initialise()
    ready = planner.prepare(config, 'v5e:2x4')
    simulated = planner.plan(config, 'h100:8', search=False)  # CPU devices
    print(json.dumps({
        'mesh': mesh, 'real': held(state.params) + held(state.opt_state),
        'planned': ready.state_bytes,
        'real_batch': planner.per_chip_bytes(ready.batch),
        'simulated_arguments': simulated.memory.arguments,
        'real_step': state.step.nbytes}), flush=True)


if __name__ == '__main__':
  main(sys.argv[1])
