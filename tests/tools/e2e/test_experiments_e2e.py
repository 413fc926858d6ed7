"""Experiment files that train: lm_offline's LLaMA variant."""

import math

from conftest import load_experiment
from conftest import raises_naming
from transformer import train


def test_lm_offline_llama_runlocal_trains_a_llama(tmp_path):
  """`lm_offline.py:model=llama,runlocal` trains the LLaMA family from
  scratch: RMSNorm, SwiGLU, rotary positions, grouped-query attention."""
  config = load_experiment('lm_offline', 'model=llama,runlocal')
  config.train.update(dict(num_steps=20, eval_every=20, checkpoint_every=20))
  result = train.train_and_evaluate(config, str(tmp_path))
  model = train.Trainer(config, str(tmp_path)).task.model_config
  assert (model.norm, model.activation, model.positional_encoding,
          model.num_heads, model.num_kv_heads, model.tie_embeddings) == (
              'rms', 'swiglu', 'rotary', 4, 2, False)
  # An untrained model predicts about uniformly: loss log V.
  assert result['loss'] < math.log(config.data.vocab_size) - 0.1
  with raises_naming(ValueError, "model='bert'", "('gpt', 'llama')"):
    load_experiment('lm_offline', 'model=bert')

