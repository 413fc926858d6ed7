"""Training with low-rank adapters (`model.lora_rank`): a step moves the
adapters alone, and the optimizer holds state for them alone."""

from flax import traverse_util
import jax
import numpy as np

from conftest import load_experiment
from transformer import sharding
from transformer import train
from transformer.attention import lora


def _sizes(tree) -> int:
  return sum(x.size for x in jax.tree.leaves(tree) if np.ndim(x))


def test_a_step_trains_the_adapters_alone(tmp_path):
  config = load_experiment('lm_offline', 'runlocal')
  config.model.lora_rank = 2
  config.model.lora_targets = 'query,key,value,out'
  config.optimizer.warmup_steps = 0  # the first step moves something
  trainer = train.Trainer(config, str(tmp_path))
  state = trainer.initialise()
  # The step donates the state it is given: read it first.
  before = traverse_util.flatten_dict(jax.device_get(state.params))
  optimizer_state = _sizes(jax.device_get(state.opt_state))
  with sharding.active(trainer.mesh, trainer.rules):
    batch = sharding.global_batch(next(trainer.task.train_iter(0)),
                                  trainer.mesh)
    after, _, health = trainer.train_step(state, batch)
  assert bool(health['finite'])
  moved = traverse_util.flatten_dict(jax.device_get(after.params))
  adapters = [k for k in before if lora.is_adapter(k)]
  assert adapters and all(
      not np.array_equal(before[k], moved[k]) for k in adapters
      if k[-1] == lora.B)  # B leaves zero at the first step
  for key in before:
    if not lora.is_adapter(key):
      np.testing.assert_array_equal(moved[key], before[key], err_msg=key)
  # Adam's two moments, for the adapters only.
  adapter_count = sum(before[k].size for k in adapters)
  assert optimizer_state == 2 * adapter_count
  full = train.Trainer(load_experiment('lm_offline', 'runlocal'),
                       str(tmp_path / 'full'))
  assert _sizes(jax.device_get(full.initialise().opt_state)) == 2 * sum(
      v.size for k, v in before.items() if not lora.is_adapter(k))
