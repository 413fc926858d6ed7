"""GPT-2 checkpoints in the Hugging Face layout (config.json and
model.safetensors, or sharded safetensors with an index) into `decoder`.

The mapping: wte -> the tied token embedding, wpe -> learned positions,
h.i.ln_1/ln_2 -> the pre-LN norms of block i, attn.c_attn ([D, 3D], Conv1D
weights are [in, out]) split into query, key and value [D, N, H], attn.c_proj
-> out [N, H, D], mlp.c_fc/c_proj -> wi/wo, ln_f -> the final norm. GPT-2's
'gelu_new' is the tanh approximation, which `nn.gelu` computes by default.

Workdirs (`python -m transformer.tools.convert`) use our ids
(`published_ids.IdOrder`, moved by `vocabulary_rows`): GPT-2 has no
padding token, so the table gains a zero row at id 0 that the model never
predicts (`mask_padding`), <|endoftext|> (wherever the tokenizer has it)
moves to id 1 (EOS) and the other ids follow in order. Export moves them
back, so a converted model exports to the published tensors.

GPT2Config, field by field (transformers' defaults, `DEFAULTS`, stand for
the fields a config.json omits):
- honoured: vocab_size, n_positions, n_embd, n_layer, n_head, n_inner,
  activation_function (`files.HF_ACTIVATIONS`), layer_norm_epsilon;
  resid_pdrop and attn_pdrop become the dropout rates of fine-tuning.
- refused unless they leave the computation ours (`REFUSED`):
  scale_attn_weights, scale_attn_by_inverse_layer_idx,
  add_cross_attention, tie_word_embeddings, pruned_heads; an lm_head.weight
  that differs from wte.
- ignored, as they do not change the logits: reorder_and_upcast_attn (the
  same products in float32, scaled before rather than after), embd_pdrop
  (dropout, off at inference), initializer_range, summary_* (the
  multiple-choice head of GPT2DoubleHeadsModel, not read), use_cache,
  bos_token_id, eos_token_id (generation; convert reads it as EOS), pad_token_id (sequence classification only), n_ctx (old alias),
  and every model's architectures, transformers_version, dtype,
  output_*, return_dict, chunk_size_feed_forward, id2label, label2id,
  problem_type and generation settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.data import published_ids
from transformer.interop import files
from transformer.interop import vocabulary_rows
from transformer.models import decoder

# GPT2Config's defaults of the fields that change the computation.
DEFAULTS = dict(
    vocab_size=50_257, n_positions=1_024, n_embd=768, n_layer=12, n_head=12,
    n_inner=None, activation_function='gelu_new', layer_norm_epsilon=1e-5,
    resid_pdrop=0.1, attn_pdrop=0.1, scale_attn_weights=True,
    scale_attn_by_inverse_layer_idx=False, add_cross_attention=False,
    tie_word_embeddings=True)
# field -> (values that compute what we do, what others make GPT-2 compute).
REFUSED = {
    'scale_attn_weights': ((True,), 'attention logits not divided by '
                           'sqrt(head size)'),
    'scale_attn_by_inverse_layer_idx': ((False,), 'the attention logits of '
                                        'layer i also divided by i + 1'),
    'add_cross_attention': ((False,), 'cross-attention layers to an '
                            "encoder's states, which our decoder has not"),
    'tie_word_embeddings': ((True,), 'an output projection (lm_head) of its '
                            'own instead of the token embedding'),
}


def config_from_hf(hf: dict[str, Any]) -> decoder.Config:
  """Our decoder config for a GPT-2 config.json.

  Raises:
    ValueError: another model type, or naming each refused field.
  """
  hf, activation = files.hf_config(hf, 'gpt2', DEFAULTS, REFUSED,
                                   'activation_function',
                                   heads=('n_embd', 'n_head'))
  d_model = hf['n_embd']
  return decoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['n_positions'],
      num_layers=hf['n_layer'], d_model=d_model, num_heads=hf['n_head'],
      d_ff=hf['n_inner'] or 4 * d_model, activation=activation,
      norm_position='pre', positional_encoding='learned',
      layer_norm_epsilon=hf['layer_norm_epsilon'],
      dropout_rate=hf['resid_pdrop'], attention_dropout_rate=hf['attn_pdrop'])


def params_from_hf(tensors: dict[str, np.ndarray],
                   config: decoder.Config) -> dict[str, Any]:
  """Our parameter tree from GPT-2's tensors; every name and shape checked.

  Raises:
    ValueError: listing missing, unexpected and mis-shaped tensors.
  """
  # Checkpoints saved from GPT2LMHeadModel prefix names with 'transformer.'.
  tensors = {name.removeprefix('transformer.'): value
             for name, value in tensors.items()}
  head = tensors.pop('lm_head.weight', None)
  if head is not None and not np.array_equal(head, tensors.get('wte.weight')):
    raise ValueError('lm_head.weight differs from wte.weight: the checkpoint '
                     'does not tie its output projection to the token '
                     'embedding, as our decoder does.')
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


def load(directory: str) -> tuple[decoder.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face GPT-2 directory."""
  return files.load_hf(directory, config_from_hf, params_from_hf,
                       DEFAULTS)


def to_hf(params: dict[str, Any], config: decoder.Config,
          ids: published_ids.IdOrder | None = None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a GPT-2
  config.json dict and tensors named as GPT2LMHeadModel saves them. A
  converted workdir's parameters (our ids, `mask_padding`) go back to
  GPT-2's ids with its tokenizer's `ids` (`task.tokenizer.ids`)."""
  config, params = vocabulary_rows.decoder_in_published_ids(
      config, params, ids, 'GPT-2')
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
            config: decoder.Config,
            ids: published_ids.IdOrder | None = None) -> None:
  """Writes config.json and model.safetensors that GPT2LMHeadModel loads
  (`ids` as in `to_hf`)."""
  files.save_hf(directory, *to_hf(params, config, ids))
