"""Llama checkpoints: a LLaMA-style decoder written in the Hugging Face
layout loads back to the same parameters and logits (offline), refused
config fields are named, and, where `transformers` and `torch` are
installed (`pip install -e ".[interop]"`), a randomly initialised
LlamaForCausalLM (grouped-query attention; untied and tied output layers)
gives the same logits as our decoder after `llama.load`."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.interop import llama
from transformer.models import decoder

TOKENS = np.array([[5, 9, 3, 17, 60, 2, 44, 8], [1, 7, 7, 30, 12, 50, 0, 4]])


def tiny(**overrides):
  return decoder.config_for('tiny', **{
      **decoder.LLAMA, 'vocab_size': 64, 'max_length': 32, 'num_heads': 4,
      'num_kv_heads': 2, 'd_ff': 48, 'dropout_rate': 0.0, **overrides})


def logits(config, params, tokens=TOKENS):
  return np.asarray(decoder.Decoder(config).apply(
      {'params': params}, jnp.asarray(tokens), deterministic=True))


@pytest.mark.parametrize('tied', [False, True])
def test_written_and_read_back_unchanged(tmp_path, tied):
  config = tiny(tie_embeddings=tied)
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.asarray(TOKENS), deterministic=True))['params']
  llama.save_hf(str(tmp_path), params, config)
  loaded_config, loaded = llama.load(str(tmp_path))
  assert loaded_config == config
  jax.tree.map(np.testing.assert_array_equal, loaded,
               jax.tree.map(np.asarray, params))
  np.testing.assert_array_equal(logits(loaded_config, loaded),
                                logits(config, params))


def test_refused_fields_and_bad_tensors_are_named(tmp_path):
  config = tiny()
  hf, tensors = llama.to_hf(nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.asarray(TOKENS), deterministic=True))['params'],
                            config)
  with pytest.raises(ValueError, match='rope_scaling.*attention_bias'):
    llama.config_from_hf({**hf, 'rope_scaling': {'type': 'linear',
                                                 'factor': 2.0},
                          'attention_bias': True})
  with pytest.raises(ValueError, match='rope_theta'):
    llama.config_from_hf({**hf, 'rope_theta': 500_000.0})
  with pytest.raises(ValueError, match='model_type'):
    llama.config_from_hf({**hf, 'model_type': 'mistral'})
  del tensors['model.layers.1.mlp.up_proj.weight']
  tensors['model.layers.0.self_attn.k_proj.weight'] = np.zeros((32, 32))
  with pytest.raises(ValueError, match='missing model.layers.1.mlp.up_proj'
                     r'.*k_proj.weight: expected \(16, 32\)'):
    llama.params_from_hf(tensors, config)
  with pytest.raises(ValueError, match='LLaMA-shaped'):
    llama.to_hf({}, decoder.config_for('tiny'))


torch = None


@pytest.fixture(scope='module')
def reference():
  global torch
  torch = pytest.importorskip('torch')
  return pytest.importorskip('transformers')


@pytest.mark.parametrize('tied', [False, True])
def test_logits_equal_transformers_llama(reference, tmp_path, tied):
  hf_config = reference.LlamaConfig(
      vocab_size=64, hidden_size=32, intermediate_size=48,
      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      max_position_embeddings=32, rms_norm_eps=1e-5,
      tie_word_embeddings=tied)
  torch.manual_seed(0)
  model = reference.LlamaForCausalLM(hf_config).eval()
  with torch.no_grad():  # norms start at 1: make them matter
    for name, parameter in model.named_parameters():
      if 'norm' in name:
        parameter.uniform_(0.5, 1.5)
  model.save_pretrained(tmp_path, safe_serialization=True)
  assert json.loads((tmp_path / 'config.json').read_text())[
      'model_type'] == 'llama'
  config, params = llama.load(str(tmp_path))
  assert config.num_kv_heads == 2 and config.tie_embeddings == tied
  with torch.no_grad():
    expected = model(torch.tensor(TOKENS)).logits.numpy()
  np.testing.assert_allclose(logits(config, params), expected, rtol=1e-4,
                             atol=1e-4)
