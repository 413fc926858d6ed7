"""One training step of the MT Transformer and the GPT model under several
meshes, compared with one device. Run by tests/train/test_sharding.py with 8
simulated CPU devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python tests/sharded_steps.py OUTPUT_DIR

Prints one JSON object: for each model and mesh, the loss, the largest
parameter difference from the one-device step, and the shard shapes of a few
parameters and of the optimizer state.
"""

import json
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import load_experiment  # pylint: disable=wrong-import-position
from transformer import sharding  # pylint: disable=wrong-import-position
from transformer import train  # pylint: disable=wrong-import-position

MESHES = {
    'data': dict(data=8, fsdp=1, tensor=1),
    'fsdp': dict(data=1, fsdp=8, tensor=1),
    'tensor': dict(data=1, fsdp=1, tensor=8),
    '2x2x2': dict(data=2, fsdp=2, tensor=2),
}
# Parameters whose shard shapes the test checks, per model.
WATCHED = {
    'mt': ("['decoder']['layer_0']['mlp']['wi']['kernel']",
           "['embed']['embed']['embedding']"),
    'gpt': ("['blocks']['layer_0']['mlp']['wi']['kernel']",
            "['blocks']['layer_0']['self_attention']['query']['kernel']"),
}


def experiment(model: str):
  """A tiny config with 8 heads, so every mesh axis divides the model."""
  config = load_experiment('mt_offline' if model == 'mt' else 'lm_offline',
                           'runlocal')
  config.model.update(dict(d_model=64, num_heads=8, d_ff=128))
  config.data.vocab_size = 256
  # SGD makes the update linear in the gradient, so float32 rounding in the
  # sharded reductions stays at rounding size (Adam's first step is
  # g / |g|, which turns tiny differences near zero into +-learning_rate).
  config.optimizer.update(dict(name='sgd', schedule='constant',
                               learning_rate=0.5, weight_decay=0.0))
  return config


def shard_shapes(tree, names):
  flat = {jax.tree_util.keystr(path): leaf
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}
  return {name: [list(flat[name].shape),
                 list(flat[name].sharding.shard_shape(flat[name].shape)),
                 str(flat[name].sharding.spec)] for name in names}


def run(model: str, workdir: str) -> dict:
  config = experiment(model)
  config.mesh.update(MESHES['data'])
  # One batch for every mesh, with rows for 8 data-parallel shards.
  batch = next(train.Trainer(config, workdir).task.train_iter(0))
  results = {}
  for name, mesh in {'single': None, **MESHES}.items():
    if mesh is None:
      config.mesh.update(dict(data=-1, fsdp=1, tensor=1))
      trainer = train.Trainer(config, workdir, devices=jax.devices()[:1])
    else:
      config.mesh.update(mesh)
      trainer = train.Trainer(config, workdir)
    with sharding.active(trainer.mesh, trainer.rules):
      state = trainer.initialise()
      new_state, sums, _ = trainer.train_step(
          state, sharding.global_batch(batch, trainer.mesh))
    params = jax.device_get(new_state.params)
    if mesh is None:
      reference_params = params
    difference = max(float(np.abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(params), jax.tree.leaves(reference_params)))
    results[name] = {
        'loss': float(sums['loss'][0] / sums['loss'][1]),
        'max_param_difference': difference,
        'mesh': dict(trainer.mesh.shape),
        'shards': shard_shapes(new_state.params, WATCHED[model]),
    }
  return results


def indivisible(workdir: str) -> str:
  """The error for 4 heads over a tensor axis of 8."""
  config = experiment('gpt')
  config.model.num_heads = 4
  config.mesh.update(MESHES['tensor'])
  try:
    train.Trainer(config, workdir)
  except ValueError as e:
    return str(e)
  return 'no error'


def main():
  out = sys.argv[1]
  assert len(jax.devices()) == 8, jax.devices()
  results = {model: run(model, os.path.join(out, model))
             for model in ('mt', 'gpt')}
  results['indivisible'] = indivisible(os.path.join(out, 'gpt'))
  print(json.dumps(results))


if __name__ == '__main__':
  main()
