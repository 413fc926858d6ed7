"""GPT-2 checkpoints in the Hugging Face layout (config.json and
model.safetensors, or sharded safetensors with an index) into `decoder`.

The mapping: wte -> the tied token embedding, wpe -> learned positions,
h.i.ln_1/ln_2 -> the pre-LN norms of block i, attn.c_attn ([D, 3D], Conv1D
weights are [in, out]) split into query, key and value [D, N, H], attn.c_proj
-> out [N, H, D], mlp.c_fc/c_proj -> wi/wo, ln_f -> the final norm. GPT-2's
'gelu_new' is the tanh approximation, which `nn.gelu` computes by default.

Workdirs (`python -m transformer.tools.convert`) use our ids (`with_our_ids`):
GPT-2 has no padding token, so the table gains a zero row at id 0 that the
model never predicts (`mask_padding`), <|endoftext|> moves to id 1 (EOS)
and the other ids follow in order (`vocabularies.GPT2Tokenizer`). Export
undoes this, so a converted model exports to the published layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.interop import files
from transformer.models import decoder

def config_from_hf(hf: dict[str, Any]) -> decoder.Config:
  """Our decoder config for a GPT-2 config.json."""
  activation = files.hf_config(hf, 'gpt2', 'activation_function', 'gelu_new')
  d_model = hf['n_embd']
  return decoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['n_positions'],
      num_layers=hf['n_layer'], d_model=d_model, num_heads=hf['n_head'],
      d_ff=hf.get('n_inner') or 4 * d_model, activation=activation,
      norm_position='pre', positional_encoding='learned',
      layer_norm_epsilon=hf.get('layer_norm_epsilon', 1e-5),
      dropout_rate=hf.get('resid_pdrop', 0.1))


def params_from_hf(tensors: dict[str, np.ndarray],
                   config: decoder.Config) -> dict[str, Any]:
  """Our parameter tree from GPT-2's tensors; every name and shape checked.

  Raises:
    ValueError: listing missing, unexpected and mis-shaped tensors.
  """
  # Checkpoints saved from GPT2LMHeadModel prefix names with 'transformer.'.
  tensors = {name.removeprefix('transformer.'): value
             for name, value in tensors.items()}
  tensors.pop('lm_head.weight', None)  # tied to wte
  d, n = config.d_model, config.num_heads
  h, f = d // n, config.mlp_dim
  expected = {'wte.weight': (config.vocab_size, d),
              'wpe.weight': (config.max_length, d),
              'ln_f.weight': (d,), 'ln_f.bias': (d,)}
  for i in range(config.num_layers):
    expected.update({
        f'h.{i}.ln_1.weight': (d,), f'h.{i}.ln_1.bias': (d,),
        f'h.{i}.ln_2.weight': (d,), f'h.{i}.ln_2.bias': (d,),
        f'h.{i}.attn.c_attn.weight': (d, 3 * d),
        f'h.{i}.attn.c_attn.bias': (3 * d,),
        f'h.{i}.attn.c_proj.weight': (d, d), f'h.{i}.attn.c_proj.bias': (d,),
        f'h.{i}.mlp.c_fc.weight': (d, f), f'h.{i}.mlp.c_fc.bias': (f,),
        f'h.{i}.mlp.c_proj.weight': (f, d), f'h.{i}.mlp.c_proj.bias': (d,)})
  # Causal-mask buffers of old checkpoints are not parameters.
  found = {k: v for k, v in tensors.items()
           if not k.endswith(('.attn.bias', '.attn.masked_bias'))
           or k.endswith('c_attn.bias')}
  t = files.checked(found, expected, 'GPT-2')
  norm = lambda prefix: files.torch_layer_norm(t, prefix)

  blocks = {'final_norm': norm('ln_f')}
  for i in range(config.num_layers):
    p = f'h.{i}'
    qkv_kernel = np.split(t[f'{p}.attn.c_attn.weight'], 3, axis=1)
    qkv_bias = np.split(t[f'{p}.attn.c_attn.bias'], 3)
    attention = {name: {'kernel': kernel.reshape(d, n, h),
                        'bias': bias.reshape(n, h)}
                 for name, kernel, bias in zip(('query', 'key', 'value'),
                                               qkv_kernel, qkv_bias)}
    attention['out'] = {'kernel': t[f'{p}.attn.c_proj.weight'].reshape(n, h,
                                                                       d),
                        'bias': t[f'{p}.attn.c_proj.bias']}
    blocks[f'layer_{i}'] = {
        'attention_sublayer': {'norm': norm(f'{p}.ln_1')},
        'mlp_sublayer': {'norm': norm(f'{p}.ln_2')},
        'self_attention': attention,
        'mlp': {'wi': {'kernel': t[f'{p}.mlp.c_fc.weight'],
                       'bias': t[f'{p}.mlp.c_fc.bias']},
                'wo': {'kernel': t[f'{p}.mlp.c_proj.weight'],
                       'bias': t[f'{p}.mlp.c_proj.bias']}}}
  return {'embed': {'embed': {'embedding': t['wte.weight']}},
          'positions': {'embedding': t['wpe.weight']},
          'blocks': blocks}


def _table(params: dict[str, Any]) -> np.ndarray:
  return np.asarray(params['embed']['embed']['embedding'])


def _with_table(params: dict[str, Any], table: np.ndarray) -> dict[str, Any]:
  return {**params, 'embed': {'embed': {'embedding': table}}}


def with_our_ids(config: decoder.Config, params: dict[str, Any],
                 eos_id: int) -> tuple[decoder.Config, dict[str, Any]]:
  """GPT-2's vocabulary in our order: a masked zero row for padding (0),
  <|endoftext|> (`eos_id`) as 1, then the other ids in order."""
  table = _table(params)
  others = np.delete(np.arange(len(table)), eos_id)
  table = np.concatenate([np.zeros_like(table[:1]), table[[eos_id]],
                          table[others]])
  return (config.replace(vocab_size=len(table), mask_padding=True),
          _with_table(params, table))


def with_gpt2_ids(config: decoder.Config, params: dict[str, Any],
                  eos_id: int) -> tuple[decoder.Config, dict[str, Any]]:
  """The inverse of `with_our_ids`."""
  table = _table(params)[1:]  # without padding
  eos, others = table[0], table[1:]
  table = np.concatenate([others[:eos_id], eos[None], others[eos_id:]])
  return (config.replace(vocab_size=len(table), mask_padding=False),
          _with_table(params, table))


def load(directory: str) -> tuple[decoder.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face GPT-2 directory."""
  return files.load_hf(directory, config_from_hf, params_from_hf)


def to_hf(params: dict[str, Any], config: decoder.Config
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a GPT-2
  config.json dict and tensors named as GPT2LMHeadModel saves them. A
  converted model (`mask_padding`) goes back to GPT-2's ids, its
  <|endoftext|> at the end of the vocabulary, where GPT-2 has it."""
  if config.mask_padding:
    config, params = with_gpt2_ids(config, params, config.vocab_size - 2)
  if (config.norm_position, config.positional_encoding,
      config.activation) != ('pre', 'learned', 'gelu') or config.num_kv_heads:
    raise ValueError('Only GPT-2-shaped decoders export to the GPT-2 layout '
                     '(pre-LN, learned positions, tanh GELU, all heads).')
  d = config.d_model
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  blocks = params['blocks']
  tensors = {'transformer.wte.weight': params['embed']['embed']['embedding'],
             'transformer.wpe.weight': params['positions']['embedding'],
             'transformer.ln_f.weight': blocks['final_norm']['scale'],
             'transformer.ln_f.bias': blocks['final_norm']['bias']}
  for i in range(config.num_layers):
    ours, p = blocks[f'layer_{i}'], f'transformer.h.{i}'
    attention = ours['self_attention']
    tensors.update({
        f'{p}.ln_1.weight': ours['attention_sublayer']['norm']['scale'],
        f'{p}.ln_1.bias': ours['attention_sublayer']['norm']['bias'],
        f'{p}.ln_2.weight': ours['mlp_sublayer']['norm']['scale'],
        f'{p}.ln_2.bias': ours['mlp_sublayer']['norm']['bias'],
        f'{p}.attn.c_attn.weight': np.concatenate(
            [np.asarray(attention[n]['kernel']).reshape(d, d)
             for n in ('query', 'key', 'value')], axis=1),
        f'{p}.attn.c_attn.bias': np.concatenate(
            [np.asarray(attention[n]['bias']).reshape(d)
             for n in ('query', 'key', 'value')]),
        f'{p}.attn.c_proj.weight': np.asarray(
            attention['out']['kernel']).reshape(d, d),
        f'{p}.attn.c_proj.bias': attention['out']['bias'],
        f'{p}.mlp.c_fc.weight': ours['mlp']['wi']['kernel'],
        f'{p}.mlp.c_fc.bias': ours['mlp']['wi']['bias'],
        f'{p}.mlp.c_proj.weight': ours['mlp']['wo']['kernel'],
        f'{p}.mlp.c_proj.bias': ours['mlp']['wo']['bias']})
  hf = {'model_type': 'gpt2', 'architectures': ['GPT2LMHeadModel'],
        'vocab_size': config.vocab_size, 'n_positions': config.max_length,
        'n_embd': d, 'n_layer': config.num_layers, 'n_head': config.num_heads,
        'n_inner': config.mlp_dim, 'activation_function': 'gelu_new',
        'layer_norm_epsilon': config.layer_norm_epsilon,
        'resid_pdrop': config.dropout_rate, 'embd_pdrop': config.dropout_rate,
        'attn_pdrop': config.attention_dropout_rate,
        'tie_word_embeddings': True}
  return hf, {name: array(value) for name, value in tensors.items()}


def save_hf(directory: str, params: dict[str, Any],
            config: decoder.Config) -> None:
  """Writes config.json and model.safetensors that GPT2LMHeadModel loads."""
  files.save_hf(directory, *to_hf(params, config))
