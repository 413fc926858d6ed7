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

Ids stay the checkpoint's (Llama's <unk> is 0, which our tasks reserve for
padding): `load` serves logits and scoring in its own ids.

LlamaConfig, field by field (transformers' defaults, `DEFAULTS`, stand for
the fields a config.json omits):
- honoured: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
  num_attention_heads, num_key_value_heads, head_dim (when D / N),
  max_position_embeddings, rms_norm_eps, hidden_act ('silu': SwiGLU;
  'gelu': GeGLU), tie_word_embeddings; attention_dropout becomes the
  attention dropout of fine-tuning.
- refused unless they leave the computation ours (`REFUSED`): rope_theta
  other than 10,000, rope_scaling, attention_bias, mlp_bias, pretraining_tp
  above 1, a head_dim other than hidden_size / num_attention_heads.
- ignored, as they do not change the logits: initializer_range, use_cache,
  bos/eos/pad token ids (generation), and every model's architectures,
  transformers_version, torch_dtype, output_* and generation settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.interop import files
from transformer.models import decoder

# LlamaConfig's defaults of the fields that change the computation.
DEFAULTS = dict(
    vocab_size=32_000, hidden_size=4_096, intermediate_size=11_008,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
    head_dim=None, hidden_act='silu', max_position_embeddings=2_048,
    rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10_000.0,
    rope_scaling=None, attention_bias=False, attention_dropout=0.0,
    mlp_bias=False, pretraining_tp=1)
REFUSED = {
    'rope_theta': ((10_000.0, 10_000), 'rotary frequencies of another '
                   'base (ours rotate with base 10,000)'),
    'rope_scaling': ((None,), 'rescaled rotary positions (long-context '
                     'variants)'),
    'attention_bias': ((False,), 'biases on the attention projections'),
    'mlp_bias': ((False,), 'biases in the feed-forward layers'),
    'pretraining_tp': ((1,), 'the feed-forward products split into slices '
                       'summed in another order'),
}
# Hugging Face's MLP nonlinearity (our name of it) -> our gated activation.
_GATED = {'swish': 'swiglu', 'gelu_exact': 'geglu'}


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
      attention_dropout_rate=hf['attention_dropout'])


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
  return files.load_hf(directory, config_from_hf, params_from_hf)


def to_hf(params: dict[str, Any], config: decoder.Config
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a Llama
  config.json dict and tensors named as LlamaForCausalLM saves them."""
  if (config.norm, config.norm_position, config.positional_encoding,
      config.use_bias, config.mask_padding) != ('rms', 'pre', 'rotary', False,
                                                False) or (
                                                    config.activation
                                                    not in _GATED.values()):
    raise ValueError('Only LLaMA-shaped decoders export to the Llama layout '
                     '(pre-RMSNorm, rotary positions, a gated feed-forward '
                     'layer, no biases).')
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
        'tie_word_embeddings': config.tie_embeddings, 'rope_theta': 10_000.0,
        'attention_dropout': config.attention_dropout_rate}
  return hf, {name: array(value) for name, value in tensors.items()}


def save_hf(directory: str, params: dict[str, Any],
            config: decoder.Config) -> None:
  """Writes config.json and model.safetensors that LlamaForCausalLM loads."""
  files.save_hf(directory, *to_hf(params, config))
