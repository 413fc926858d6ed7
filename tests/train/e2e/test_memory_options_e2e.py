"""Memory and speed options in a run: gradient accumulation, remat, scanned
layers and bfloat16 optimizer state together train, evaluate and generate.
(That each leaves the computed function unchanged:
../test_memory_options.py.)"""

import jax
import jax.numpy as jnp
import numpy as np

from conftest import load_experiment
from transformer import train


def test_options_run_end_to_end_with_bfloat16_first_moment(tmp_path):
  """GPT with scanned, rematerialised layers, micro-batches and a bfloat16
  Adam first moment: trains, evaluates and generates (unstacked)."""
  config = load_experiment('lm_offline', 'runlocal')
  config.model.update(dict(scan_layers=True, remat='dots'))
  config.train.update(dict(num_steps=4, eval_every=4, microbatches=2))
  config.optimizer.mu_dtype = 'bfloat16'
  result = train.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(result['loss'])
  trainer = train.Trainer(config, str(tmp_path))
  mu = [x for x in jax.tree.leaves(trainer.abstract.opt_state)
        if x.dtype == jnp.bfloat16]
  assert len(mu) == len(jax.tree.leaves(trainer.abstract.params))
  assert (tmp_path / 'reports' / 'samples_step4.txt').exists()
