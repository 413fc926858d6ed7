"""Llama checkpoints: a LLaMA-style decoder written in the Hugging Face
layout loads back to the same parameters and logits (offline), refused
config fields are named, and, where `transformers` and `torch` are
installed (`pip install -e ".[interop]"`), a randomly initialised
LlamaForCausalLM (grouped-query attention; untied and tied output layers)
gives the same logits as our decoder after `llama.load`: also with another
rotary base and each scaling (linear, dynamic NTK, llama3), in the config
layouts of transformers 5 (rope_parameters) and 4 (top-level rope_theta and
rope_scaling), every rotary field seen by the comparison, other rope types
refused by name, and greedy continuations with the KV cache token for token
those of transformers' `generate`."""

import dataclasses
import functools
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from conftest import randomised
from transformer.core import positional
from transformer.interop import llama
from transformer.models import decoder
from transformer.tasks import language_modeling

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
  with raises_naming(ValueError, 'attention_bias=True', 'mlp_bias=True',
                     'choose another checkpoint'):
    llama.config_from_hf({**hf, 'attention_bias': True, 'mlp_bias': True})
  with raises_naming(ValueError, "model_type='mistral'", "'llama'"):
    llama.config_from_hf({**hf, 'model_type': 'mistral'})
  del tensors['model.layers.1.mlp.up_proj.weight']
  tensors['model.layers.0.self_attn.k_proj.weight'] = np.zeros((32, 32))
  with raises_naming(ValueError, 'missing model.layers.1.mlp.up_proj.weight',
                     'model.layers.0.self_attn.k_proj.weight',
                     'expected (16, 32)', 'found (32, 32)'):
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


# ----------------------------------------------------------------------------
# Rotary base and scalings
# ----------------------------------------------------------------------------

# Head dim 16 (two heads sharing one key/value head), so that llama3's three
# bands all occur at an original context of 32 (tests/attention/test_rope.py), and a
# context of 16 positions (dynamic NTK's original one) that the 48 tokens
# of LONG exceed three times.
ROPE_MODEL = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
                  num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=16,
                  rms_norm_eps=1e-5)
LONG = np.random.default_rng(1).integers(1, 64, (2, 48))
# Each setting under test, as transformers 5's rope_parameters.
ROPES = {
    'theta': dict(rope_type='default', rope_theta=500_000.0),
    'linear': dict(rope_type='linear', factor=4.0, rope_theta=10_000.0),
    'dynamic': dict(rope_type='dynamic', factor=2.0, rope_theta=10_000.0),
    'llama3': dict(rope_type='llama3', factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=32,
                   rope_theta=10_000.0),
}
# Our fields of each.
OURS = {
    'theta': dict(rope_theta=500_000.0, rope_scaling=''),
    'linear': dict(rope_scaling='linear', rope_factor=4.0),
    'dynamic': dict(rope_scaling='dynamic', rope_factor=2.0,
                    rope_original_max_positions=16),
    'llama3': dict(rope_scaling='llama3', rope_factor=8.0,
                   rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
                   rope_original_max_positions=32),
}
LAYOUTS = ('transformers5', 'transformers4')


def rope_json(rope, layout):
  """config.json's rotary fields: transformers 5's rope_parameters, or
  transformers 4's top-level rope_theta and rope_scaling, with the type
  under 'type' (as before 4.43) or 'rope_type' (llama3, from 4.43)."""
  parameters = dict(ROPES[rope])
  if layout == 'transformers5':
    return {'rope_parameters': parameters}
  theta, kind = parameters.pop('rope_theta'), parameters.pop('rope_type')
  if kind == 'default':
    return {'rope_theta': theta}
  return {'rope_theta': theta, 'rope_scaling': {
      'rope_type' if kind == 'llama3' else 'type': kind, **parameters}}


def publish_rope(reference, directory, rope, layout, **extra):
  """A randomised tiny LlamaForCausalLM saved with `rope` (ROPES) in
  `layout` and the `extra` fields, config.json written here whatever layout
  the installed transformers writes."""
  if layout == 'transformers5' and int(
      reference.__version__.split('.')[0]) < 5:
    pytest.skip('transformers 4 does not read rope_parameters')
  torch.manual_seed(0)
  randomised(reference.LlamaForCausalLM(
      reference.LlamaConfig(**ROPE_MODEL))).save_pretrained(directory)
  path = directory / 'config.json'
  written = {k: v for k, v in json.loads(path.read_text()).items()
             if k not in ('rope_parameters', 'rope_theta', 'rope_scaling')}
  path.write_text(json.dumps({**written, **rope_json(rope, layout),
                              **extra}))


def fresh_reference(reference, directory):
  """The published model as transformers reads config.json, loaded anew:
  its dynamic NTK frequencies are state (they only grow until a sequence
  fits the original context again), so each comparison starts afresh."""
  return reference.LlamaForCausalLM.from_pretrained(directory).eval()


def reference_logits(reference, directory, tokens=LONG):
  with torch.no_grad():
    return fresh_reference(reference, directory)(
        torch.tensor(tokens)).logits.numpy()


def relative_error(ours, theirs):
  return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('rope', list(ROPES))
def test_rotary_settings_give_transformers_logits(reference, tmp_path, rope,
                                                  layout):
  publish_rope(reference, tmp_path, rope, layout)
  config, params = llama.load(str(tmp_path))
  assert {k: getattr(config, k) for k in OURS[rope]} == OURS[rope]
  error = relative_error(logits(config, params, LONG),
                         reference_logits(reference, tmp_path))
  assert error < 2e-5, error


def test_a_top_level_original_context_is_llama3s(reference, tmp_path):
  """transformers 5 takes llama3's original context from a top-level
  original_max_position_embeddings (as Phi-3 saves it) before the dict's."""
  publish_rope(reference, tmp_path, 'llama3', 'transformers5',
               original_max_position_embeddings=64)
  config, params = llama.load(str(tmp_path))
  assert config.rope_original_max_positions == 64
  error = relative_error(logits(config, params, LONG),
                         reference_logits(reference, tmp_path))
  assert error < 2e-5, error


DROP = object()
# (setting, layout, the path of a field in config.json, what replaces it:
# DROP leaves it out, for the fields without which transformers reads
# another model; the required ones get another value).
FIELDS = [
    ('theta', 'transformers5', ('rope_parameters', 'rope_theta'), DROP),
    ('theta', 'transformers4', ('rope_theta',), DROP),
    ('linear', 'transformers5', ('rope_parameters', 'rope_type'), DROP),
    ('linear', 'transformers5', ('rope_parameters', 'factor'), 2.0),
    ('linear', 'transformers4', ('rope_scaling',), DROP),
    ('linear', 'transformers4', ('rope_scaling', 'type'), DROP),
    ('linear', 'transformers4', ('rope_scaling', 'factor'), 2.0),
    ('dynamic', 'transformers5', ('rope_parameters', 'rope_type'), DROP),
    ('dynamic', 'transformers5', ('rope_parameters', 'factor'), 4.0),
    # dynamic NTK's original context
    ('dynamic', 'transformers5', ('max_position_embeddings',), 32),
    ('dynamic', 'transformers4', ('rope_scaling', 'type'), DROP),
    ('llama3', 'transformers5', ('rope_parameters', 'rope_type'), DROP),
    ('llama3', 'transformers5', ('rope_parameters', 'factor'), 4.0),
    ('llama3', 'transformers5', ('rope_parameters', 'low_freq_factor'), 2.0),
    ('llama3', 'transformers5', ('rope_parameters', 'high_freq_factor'), 2.0),
    ('llama3', 'transformers5',
     ('rope_parameters', 'original_max_position_embeddings'), DROP),
    ('llama3', 'transformers5', ('original_max_position_embeddings',), 64),
    ('llama3', 'transformers4', ('rope_scaling', 'rope_type'), DROP),
    ('llama3', 'transformers4',
     ('rope_scaling', 'original_max_position_embeddings'), 64),
]


@pytest.mark.parametrize(
    'rope,layout,path,value', FIELDS,
    ids=lambda x: '.'.join(x) if isinstance(x, tuple) else (
        'drop' if x is DROP else str(x)))
def test_each_rotary_field_changes_the_logits(reference, tmp_path, rope,
                                              layout, path, value):
  """The comparisons above see every rotary field: read with it left out
  or changed, our logits are another model's."""
  publish_rope(reference, tmp_path, rope, layout)
  expected = reference_logits(reference, tmp_path)
  config_path = tmp_path / 'config.json'
  edited = json.loads(config_path.read_text())
  *parents, name = path
  node = functools.reduce(lambda d, key: d[key], parents, edited)
  if value is DROP:
    del node[name]
  else:
    node[name] = value
  config_path.write_text(json.dumps(edited))
  assert relative_error(logits(*llama.load(str(tmp_path)), LONG),
                        expected) > 1e-3


@pytest.mark.parametrize('fields,named', [
    ({'rope_parameters': {'rope_type': 'yarn', 'factor': 4.0}},
     "rope_parameters['rope_type']='yarn' is not supported"),
    ({'rope_parameters': {'rope_type': 'longrope', 'factor': 4.0}},
     "rope_parameters['rope_type']='longrope' is not supported"),
    ({'rope_parameters': {'rope_type': 'proportional'}},
     "rope_parameters['rope_type']='proportional' is not supported"),
    ({'rope_scaling': {'type': 'yarn', 'factor': 4.0}},
     "rope_scaling['type']='yarn' is not supported"),
    ({'rope_scaling': {'type': 'su', 'short_factor': [1.0]}},
     "rope_scaling['type']='su' is not supported"),
    ({'rope_scaling': {'rope_type': 'longrope', 'factor': 4.0}},
     "rope_scaling['rope_type']='longrope' is not supported"),
    # rope_scaling wins over rope_parameters, as in transformers 5
    ({'rope_scaling': {'type': 'yarn', 'factor': 4.0},
      'rope_parameters': {'rope_type': 'default'}},
     "rope_scaling['type']='yarn' is not supported"),
    ({'partial_rotary_factor': 0.5}, 'partial_rotary_factor=0.5 is not '
     'supported'),
    ({'rope_parameters': {'rope_type': 'default',
                          'partial_rotary_factor': 0.25}},
     'partial_rotary_factor=0.25 is not supported'),
    ({'rope_parameters': {'rope_type': 'linear'}},
     "rope_parameters has rope_type='linear' but no 'factor'"),
    ({'rope_scaling': {'type': 'llama3', 'factor': 8.0,
                       'high_freq_factor': 4.0}},
     "rope_scaling has rope_type='llama3' but no 'low_freq_factor'"),
])
def test_other_rotary_settings_are_refused_by_name(fields, named):
  with pytest.raises(ValueError) as error:
    llama.config_from_hf({'model_type': 'llama', **ROPE_MODEL, **fields})
  assert named in str(error.value) and '\n' not in str(error.value)


@pytest.mark.parametrize('rope', list(ROPES))
def test_export_keeps_the_rotary_settings_for_transformers(reference,
                                                           tmp_path, rope):
  """`save_hf` writes the settings back (transformers 4's layout): they
  read back unchanged, and transformers computes our logits from them."""
  config = llama.config_from_hf({'model_type': 'llama', **ROPE_MODEL,
                                 **rope_json(rope, 'transformers5')})
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.asarray(LONG), deterministic=True))['params']
  params = jax.tree.map(lambda x: x + 0.2 * np.random.default_rng(
      x.size).standard_normal(x.shape), params)  # norms of 1 hide nothing
  llama.save_hf(str(tmp_path), params, config)
  assert llama.load(str(tmp_path))[0] == config
  error = relative_error(logits(config, params, LONG),
                         reference_logits(reference, tmp_path))
  assert error < 2e-5, error


def test_dynamic_export_needs_the_original_context_as_max_length():
  config = tiny(rope_scaling='dynamic', rope_factor=2.0,
                rope_original_max_positions=8)
  with raises_naming(ValueError, 'rope_original_max_positions=8',
                     'max_length=32', 'max_position_embeddings'):
    llama.to_hf({}, config)


# Two prompts, left-padded to one length, whose continuations of 30 tokens
# take the longer one from 10 positions (within the original context of
# 16) to 40 (dynamic NTK grows its base at every step past 16).
PROMPTS = [[5, 9, 3, 17, 60, 2, 44, 8, 31, 12], [7, 7, 30, 12, 50, 4, 19]]
NEW_TOKENS = 30


def reference_greedy(reference, directory, prompts):
  """transformers' greedy continuations, padding (id 0) never generated
  and no id ending them, as ours below."""
  model = fresh_reference(reference, directory)
  model.generation_config.eos_token_id = None
  width = max(map(len, prompts))
  ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
  with torch.no_grad():
    output = model.generate(ids, attention_mask=(ids != 0).long(),
                            do_sample=False, max_new_tokens=NEW_TOKENS,
                            pad_token_id=0, suppress_tokens=[0])
  return output[:, width:].numpy()


def our_greedy(config, params, prompts):
  """Our KV-cache greedy decoding (`decoding.sample` through the LM task's
  `generate_tokens`), the prompts left-padded as transformers' are."""
  width = max(map(len, prompts))
  pad = np.asarray([width - len(p) for p in prompts])
  tokens, _ = language_modeling.generate_tokens(
      decoder.build(config, decode=True), params,
      jnp.asarray([[0] * k + p for k, p in zip(pad, prompts)]),
      jnp.asarray(pad), jax.random.key(0), 1.0, 1.0,
      max_new_tokens=NEW_TOKENS, top_k=0, greedy=True,
      eos_id=-1)  # no id ends a continuation
  return np.asarray(tokens)


@pytest.mark.parametrize('rope', list(ROPES))
def test_greedy_continuations_equal_transformers_generate(reference,
                                                          tmp_path, rope,
                                                          monkeypatch):
  publish_rope(reference, tmp_path, rope, 'transformers5')
  config, params = llama.load(str(tmp_path))
  expected = reference_greedy(reference, tmp_path, PROMPTS)
  np.testing.assert_array_equal(our_greedy(config, params, PROMPTS),
                                expected)
  # The comparison sees the setting: the default rotation continues
  # otherwise.
  default = {field.name: field.default for field in dataclasses.fields(
      decoder.Config) if field.name.startswith('rope_')}
  assert (our_greedy(config.replace(**default), params, PROMPTS)
          != expected).any()
  if rope == 'dynamic':  # and each call's own frequencies: not those of
    # the longest sequence for every call
    frequencies = positional.rotary_frequencies
    monkeypatch.setattr(positional, 'rotary_frequencies',
                        lambda rope, head_dim, positions: frequencies(
                            rope, head_dim, jnp.arange(
                                len(PROMPTS[0]) + NEW_TOKENS)))
    assert (our_greedy(config, params, PROMPTS) != expected).any()
