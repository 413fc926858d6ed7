"""Llama checkpoints in the Hugging Face layout (config.json and
model.safetensors, or sharded safetensors with an index) into `decoder`
with the blocks' LLaMA options.

The mapping: model.embed_tokens -> the token embedding, layer i's
input_layernorm / post_attention_layernorm -> the pre-norms (RMSNorm,
weight -> scale), self_attn.q_proj/k_proj/v_proj (PyTorch Linear, [out,
in]) -> query [D, N, H] and key, value [D, K, H] (grouped-query attention
when K < N), o_proj -> out [N, H, D], mlp.gate_proj/up_proj/down_proj ->
wi (through SiLU), wi_linear, wo, model.norm -> the final norm, lm_head ->
the untied output layer (or the embedding, when tied). Hugging Face's
rotary positions rotate the two halves of each head (`rotate_half`), as
`positional.rotary_embedding` does, so the projections need no permutation.

`load` keeps the checkpoint's ids (Llama's <unk> is 0, which our tasks
reserve for padding) for logits and scoring in its own ids. Workdirs
(`python -m transformer.tools.convert`) use ours (`published_ids.IdOrder`,
moved by `vocabulary_rows`): a masked zero row for padding at id 0,
Llama's EOS at 1, its unknown token at 2 (where it has one), then its
other ids in order, in the embedding and the untied output layer alike;
`to_hf` with the tokenizer's `ids` goes back to Llama's.

LlamaConfig, field by field (transformers' defaults, `DEFAULTS`, stand for
the fields a config.json omits):
- honoured: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
  num_attention_heads, num_key_value_heads, head_dim (when D / N),
  max_position_embeddings, rms_norm_eps, hidden_act ('silu': SwiGLU;
  'gelu': GeGLU), tie_word_embeddings; attention_dropout becomes the
  attention dropout of fine-tuning.
- the rotary positions (`_rope_fields`, into our rope_* fields), in either
  layout: transformers 4's top-level rope_theta and rope_scaling (its type
  under 'rope_type' or 'type'), or transformers 5's rope_parameters (a dict
  with rope_type, rope_theta, factor, ...); where both are present
  rope_scaling wins, and a theta inside the dict wins over the top-level
  one, as in transformers 5. Honoured: rope_theta, and the rope types
  'default' (no scaling), 'linear' (factor), 'dynamic' (factor; the
  original context is max_position_embeddings, and the base grows with
  each call's longest position as transformers' `dynamic_rope_update`
  computes it) and 'llama3' (factor, low_freq_factor, high_freq_factor,
  original_max_position_embeddings, which a top-level
  original_max_position_embeddings overrides and max_position_embeddings
  stands in for). Refused by name: every other rope type ('yarn',
  'longrope', 'su', ...), and partial_rotary_factor other than 1.
  attention_factor is ignored: transformers uses it for yarn and longrope
  only (refused), and multiplies cos and sin by 1 for the types above.
- refused unless they leave the computation ours (`REFUSED`):
  attention_bias, mlp_bias, pretraining_tp above 1, a head_dim other than
  hidden_size / num_attention_heads.
- ignored, as they do not change the logits: initializer_range, use_cache,
  pad_token_id, bos/eos token ids (generation; a workdir conversion
  takes BOS and EOS from them, `vocabularies.llama_special_ids`), and
  every model's architectures, transformers_version, torch_dtype,
  output_* and generation settings.

`to_hf` writes the rotary settings in transformers 4's layout (top-level
rope_theta and rope_scaling), which transformers 5 reads as well; transformers
4 would ignore a rope_parameters dict and rotate at base 10,000.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.data import published_ids
from transformer.interop import files
from transformer.interop import vocabulary_rows
from transformer.models import decoder

# LlamaConfig's defaults of the fields that change the computation.
DEFAULTS = dict(
    vocab_size=32_000, hidden_size=4_096, intermediate_size=11_008,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
    head_dim=None, hidden_act='silu', max_position_embeddings=2_048,
    rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10_000.0,
    rope_scaling=None, rope_parameters=None, attention_bias=False,
    attention_dropout=0.0, mlp_bias=False, pretraining_tp=1)
REFUSED = {
    'attention_bias': ((False,), 'biases on the attention projections'),
    'mlp_bias': ((False,), 'biases in the feed-forward layers'),
    'pretraining_tp': ((1,), 'the feed-forward products split into slices '
                       'summed in another order'),
}
# Hugging Face's MLP nonlinearity (our name of it) -> our gated activation.
_GATED = {'swish': 'swiglu', 'gelu_exact': 'geglu'}
# transformers' rope types we compute -> our `positional.ROPE_SCALINGS`.
_ROPE_TYPES = {'default': '', 'linear': 'linear', 'dynamic': 'dynamic',
               'llama3': 'llama3'}


def _rope_dict(hf: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
  """(the field holding the rotary settings, its dict, its rope type):
  rope_scaling where present, as in transformers 5, else rope_parameters.

  Raises:
    ValueError: a rope type we do not compute, or a partial rotation,
      naming the field and its value.
  """
  where = 'rope_scaling' if hf['rope_scaling'] else 'rope_parameters'
  rope = hf[where] or {}
  key = 'rope_type' if 'rope_type' in rope else 'type'
  kind = rope.get(key, 'default')
  if kind not in _ROPE_TYPES:
    raise ValueError(
        f"{where}[{key!r}]={kind!r} is not supported (rotary positions "
        f"rescaled otherwise than by {', '.join(_ROPE_TYPES)}): no exact "
        f"conversion exists, choose another checkpoint.")
  partial = rope.get('partial_rotary_factor', hf.get('partial_rotary_factor',
                                                     1.0))
  if partial not in (None, 1, 1.0):
    raise ValueError(f'partial_rotary_factor={partial!r} is not supported '
                     f'(ours rotates whole heads): no exact conversion '
                     f'exists, choose another checkpoint.')
  return where, rope, kind


def _rope_fields(hf: dict[str, Any]) -> dict[str, Any]:
  """Our rope_* fields from either layout (module docstring), read as
  transformers 5 reads them: a theta in the dict wins over the top-level
  one; llama3's original context is a top-level
  original_max_position_embeddings, else the dict's, else
  max_position_embeddings (dynamic NTK's always is)."""
  where, rope, kind = _rope_dict(hf)
  needed = lambda key: _rope_parameter(rope, key, where, kind)
  fields = dict(rope_theta=float(rope.get('rope_theta', hf['rope_theta'])),
                rope_scaling=_ROPE_TYPES[kind])
  if kind != 'default':
    fields['rope_factor'] = float(needed('factor'))
  if kind == 'dynamic':
    fields['rope_original_max_positions'] = hf['max_position_embeddings']
  if kind == 'llama3':
    fields.update(
        rope_low_freq_factor=float(needed('low_freq_factor')),
        rope_high_freq_factor=float(needed('high_freq_factor')),
        rope_original_max_positions=int(hf.get(
            'original_max_position_embeddings') or rope.get(
                'original_max_position_embeddings',
                hf['max_position_embeddings'])))
  return fields


def _rope_parameter(rope: dict[str, Any], key: str, where: str,
                    kind: str) -> Any:
  if rope.get(key) is None:
    raise ValueError(f"{where} has rope_type={kind!r} but no {key!r}; "
                     f"transformers needs it too: complete config.json.")
  return rope[key]


def _hf_rope(config: decoder.Config) -> dict[str, Any]:
  """rope_theta and rope_scaling (transformers 4's layout) of our
  config, the inverse of `_rope_fields`."""
  scaling, rope = config.rope_scaling, None
  if scaling == 'dynamic' and (config.rope_original_max_positions
                               != config.max_length):
    raise ValueError(
        f"rope_scaling='dynamic' with rope_original_max_positions="
        f"{config.rope_original_max_positions} and max_length="
        f"{config.max_length}: transformers takes max_position_embeddings "
        f"as the original context, so they must be equal to export.")
  if scaling:  # 'type', which every transformers since 4.40 reads
    rope = {'type': scaling, 'factor': config.rope_factor}
  if scaling == 'llama3':
    rope.update(low_freq_factor=config.rope_low_freq_factor,
                high_freq_factor=config.rope_high_freq_factor,
                original_max_position_embeddings=(
                    config.rope_original_max_positions))
  return {'rope_theta': config.rope_theta, 'rope_scaling': rope}


def config_from_hf(hf: dict[str, Any]) -> decoder.Config:
  """Our decoder config for a Llama config.json.

  Raises:
    ValueError: another model type, naming each refused field.
  """
  hf, activation = files.hf_config(hf, 'llama', DEFAULTS, REFUSED,
                                   'hidden_act')
  d, n = hf['hidden_size'], hf['num_attention_heads']
  if activation not in _GATED:
    raise ValueError(f"hidden_act={hf['hidden_act']!r} is not supported in "
                     f"Llama's gated feed-forward layer (choose silu or "
                     f"gelu): no exact conversion exists.")
  if hf['head_dim'] not in (None, d // n) or d % n:
    raise ValueError(f"head_dim={hf['head_dim']} with hidden_size={d} and "
                     f"{n} heads is not supported: ours is hidden_size / "
                     f"num_attention_heads.")
  kv_heads = hf['num_key_value_heads'] or n
  return decoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['max_position_embeddings'],
      num_layers=hf['num_hidden_layers'], d_model=d, num_heads=n,
      num_kv_heads=None if kv_heads == n else kv_heads,
      d_ff=hf['intermediate_size'], activation=_GATED[activation],
      norm='rms', norm_position='pre', positional_encoding='rotary',
      use_bias=False, tie_embeddings=bool(hf['tie_word_embeddings']),
      layer_norm_epsilon=hf['rms_norm_eps'], dropout_rate=0.0,
      attention_dropout_rate=hf['attention_dropout'], **_rope_fields(hf))


def params_from_hf(tensors: dict[str, np.ndarray],
                   config: decoder.Config) -> dict[str, Any]:
  """Our parameter tree from Llama's tensors; every name and shape checked.

  Raises:
    ValueError: listing missing, unexpected and mis-shaped tensors.
  """
  d, n, f = config.d_model, config.num_heads, config.mlp_dim
  k, h = config.num_kv_heads or n, d // n
  # Rotary frequency buffers of old checkpoints are not parameters.
  found = {name: value for name, value in tensors.items()
           if not name.endswith('rotary_emb.inv_freq')}
  if config.tie_embeddings:
    head = found.pop('lm_head.weight', None)
    if head is not None and not np.array_equal(
        head, found.get('model.embed_tokens.weight')):
      raise ValueError('lm_head.weight differs from model.embed_tokens.weight'
                       ' although config.json ties them.')
  expected = {'model.embed_tokens.weight': (config.vocab_size, d),
              'model.norm.weight': (d,)}
  if not config.tie_embeddings:
    expected['lm_head.weight'] = (config.vocab_size, d)
  for i in range(config.num_layers):
    p = f'model.layers.{i}'
    expected.update({
        f'{p}.input_layernorm.weight': (d,),
        f'{p}.post_attention_layernorm.weight': (d,),
        f'{p}.self_attn.q_proj.weight': (n * h, d),
        f'{p}.self_attn.k_proj.weight': (k * h, d),
        f'{p}.self_attn.v_proj.weight': (k * h, d),
        f'{p}.self_attn.o_proj.weight': (d, n * h),
        f'{p}.mlp.gate_proj.weight': (f, d),
        f'{p}.mlp.up_proj.weight': (f, d),
        f'{p}.mlp.down_proj.weight': (d, f)})
  t = files.checked(found, expected, 'Llama')

  blocks = {'final_norm': {'scale': t['model.norm.weight']}}
  for i in range(config.num_layers):
    p = f'model.layers.{i}'
    kernel = lambda name, heads: t[f'{p}.self_attn.{name}.weight'].T.reshape(
        d, heads, h)
    blocks[f'layer_{i}'] = {
        'attention_sublayer': {
            'norm': {'scale': t[f'{p}.input_layernorm.weight']}},
        'mlp_sublayer': {
            'norm': {'scale': t[f'{p}.post_attention_layernorm.weight']}},
        'self_attention': {
            'query': {'kernel': kernel('q_proj', n)},
            'key': {'kernel': kernel('k_proj', k)},
            'value': {'kernel': kernel('v_proj', k)},
            'out': {'kernel': t[f'{p}.self_attn.o_proj.weight'].T.reshape(
                n, h, d)}},
        'mlp': {'wi': {'kernel': t[f'{p}.mlp.gate_proj.weight'].T},
                'wi_linear': {'kernel': t[f'{p}.mlp.up_proj.weight'].T},
                'wo': {'kernel': t[f'{p}.mlp.down_proj.weight'].T}}}
  params = {'embed': {'embed': {'embedding': t['model.embed_tokens.weight']}},
            'blocks': blocks}
  if not config.tie_embeddings:
    params['lm_head'] = {'kernel': t['lm_head.weight'].T}
  return params


def load(directory: str) -> tuple[decoder.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face Llama directory."""
  return files.load_hf(directory, config_from_hf, params_from_hf,
                       DEFAULTS)


def to_hf(params: dict[str, Any], config: decoder.Config,
          ids: published_ids.IdOrder | None = None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a Llama
  config.json dict and tensors named as LlamaForCausalLM saves them. A
  converted workdir's parameters (our ids, `mask_padding`) go back to
  Llama's ids with its tokenizer's `ids` (`task.tokenizer.ids`)."""
  config, params = vocabulary_rows.decoder_in_published_ids(
      config, params, ids, 'Llama')
  if (config.norm, config.norm_position, config.positional_encoding,
      config.use_bias) != ('rms', 'pre', 'rotary', False) or (
          config.activation not in _GATED.values()):
    raise ValueError('Only LLaMA-shaped decoders export to the Llama layout '
                     '(pre-RMSNorm, rotary positions, a gated feed-forward '
                     'layer, no biases).')
  rope = _hf_rope(config)  # before any tensor: the config may not export
  d, n = config.d_model, config.num_heads
  k, h = config.num_kv_heads or n, d // n
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  blocks = params['blocks']
  tensors = {'model.embed_tokens.weight': params['embed']['embed'][
      'embedding'], 'model.norm.weight': blocks['final_norm']['scale']}
  if not config.tie_embeddings:
    tensors['lm_head.weight'] = np.asarray(params['lm_head']['kernel']).T
  for i in range(config.num_layers):
    ours, p = blocks[f'layer_{i}'], f'model.layers.{i}'
    attention = ours['self_attention']
    flat = lambda name, heads: np.asarray(
        attention[name]['kernel']).reshape(d, heads * h).T
    tensors.update({
        f'{p}.input_layernorm.weight': ours['attention_sublayer']['norm'][
            'scale'],
        f'{p}.post_attention_layernorm.weight': ours['mlp_sublayer']['norm'][
            'scale'],
        f'{p}.self_attn.q_proj.weight': flat('query', n),
        f'{p}.self_attn.k_proj.weight': flat('key', k),
        f'{p}.self_attn.v_proj.weight': flat('value', k),
        f'{p}.self_attn.o_proj.weight': np.asarray(
            attention['out']['kernel']).reshape(n * h, d).T,
        f'{p}.mlp.gate_proj.weight': np.asarray(ours['mlp']['wi']['kernel']).T,
        f'{p}.mlp.up_proj.weight': np.asarray(
            ours['mlp']['wi_linear']['kernel']).T,
        f'{p}.mlp.down_proj.weight': np.asarray(ours['mlp']['wo']['kernel']).T})
  hf = {'model_type': 'llama', 'architectures': ['LlamaForCausalLM'],
        'vocab_size': config.vocab_size, 'hidden_size': d,
        'intermediate_size': config.mlp_dim,
        'num_hidden_layers': config.num_layers, 'num_attention_heads': n,
        'num_key_value_heads': k,
        'max_position_embeddings': config.max_length,
        'rms_norm_eps': config.layer_norm_epsilon,
        'hidden_act': 'silu' if config.activation == 'swiglu' else 'gelu',
        'tie_word_embeddings': config.tie_embeddings,
        'attention_dropout': config.attention_dropout_rate, **rope}
  return hf, {name: array(value) for name, value in tensors.items()}


def save_hf(directory: str, params: dict[str, Any],
            config: decoder.Config,
            ids: published_ids.IdOrder | None = None) -> None:
  """Writes config.json and model.safetensors that LlamaForCausalLM loads
  (`ids` as in `to_hf`)."""
  files.save_hf(directory, *to_hf(params, config, ids))
