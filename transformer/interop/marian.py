"""MarianMT (Helsinki-NLP OPUS-MT) checkpoints in the Hugging Face layout
into `encoder_decoder.Transformer`, with their SentencePiece vocabularies.

Marian is the paper's post-LN encoder-decoder with a few options of ours
set: swish activations, sinusoids laid out as [sin... | cos...], a final
logits bias, LayerNorm epsilon 1e-5, one embedding shared by encoder,
decoder and softmax. Its ids differ from ours: EOS is 0, unknown 1 and
padding (also the decoder's start symbol) the last id, while our models use
padding 0 (the start symbol), EOS 1 and unknown 2. Conversion reorders the
vocabulary, `order[our_id] = marian_id`: padding, EOS and unknown first,
then the other ids in their order. The embedding rows and the logits bias
are permuted the same way, so the model computes the same function and its
logits are Marian's, permuted.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from transformer import layers
from transformer import positional
from transformer.interop import files
from transformer.models import encoder_decoder

# What a Marian directory holds besides the weights.
SOURCE_SPM, TARGET_SPM, VOCAB = 'source.spm', 'target.spm', 'vocab.json'


def config_from_hf(hf: dict[str, Any]) -> encoder_decoder.Config:
  """Our encoder-decoder config for a MarianMT config.json."""
  activation = files.hf_config(hf, 'marian', 'activation_function', 'swish')
  sizes = {'layers': (hf['encoder_layers'], hf['decoder_layers']),
           'attention heads': (hf['encoder_attention_heads'],
                               hf['decoder_attention_heads']),
           'feed-forward widths': (hf['encoder_ffn_dim'],
                                   hf['decoder_ffn_dim'])}
  for what, (encoder, decoder) in sizes.items():
    if encoder != decoder:
      raise ValueError(f'The encoder and decoder have different {what} '
                       f'({encoder} and {decoder}); our Transformer has one '
                       'size for both.')
  unsupported = {
      'share_encoder_decoder_embeddings': (True, 'separate source and '
                                           'target embeddings'),
      'static_position_embeddings': (True, 'learned positions'),
      'normalize_before': (False, 'pre-LN layers'),
      'normalize_embedding': (False, 'a LayerNorm on the embeddings'),
      'add_final_layer_norm': (False, 'final LayerNorms')}
  for key, (supported, what) in unsupported.items():
    if hf.get(key, supported) != supported:
      raise ValueError(f'{key}={hf[key]}: Marian models with {what} are not '
                       'supported (OPUS-MT models have none).')
  if hf.get('decoder_vocab_size', hf['vocab_size']) != hf['vocab_size']:
    raise ValueError('The decoder has its own vocabulary size '
                     f"({hf['decoder_vocab_size']} != {hf['vocab_size']}); "
                     'our Transformer shares one vocabulary.')
  if hf.get('decoder_start_token_id', hf['pad_token_id']) != \
      hf['pad_token_id']:
    raise ValueError('decoder_start_token_id differs from pad_token_id; our '
                     'decoder starts from the padding id.')
  return encoder_decoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['max_position_embeddings'],
      num_layers=hf['encoder_layers'], d_model=hf['d_model'],
      num_heads=hf['encoder_attention_heads'], d_ff=hf['encoder_ffn_dim'],
      activation=activation, norm_position='post',
      positional_encoding='sinusoidal', sinusoidal_layout='concatenated',
      scale_embeddings=hf.get('scale_embedding', False),
      final_logits_bias=True, layer_norm_epsilon=1e-5,
      dropout_rate=hf.get('dropout', 0.1),
      attention_dropout_rate=hf.get('attention_dropout', 0.0))


def vocabulary_order(hf: dict[str, Any], pieces: dict[str, int]
                     ) -> np.ndarray:
  """`order[our_id] = marian_id`: padding, EOS, unknown, then the rest.

  Args:
    hf: config.json (pad_token_id, eos_token_id, vocab_size).
    pieces: vocab.json, piece -> Marian id.
  """
  size = hf['vocab_size']
  ids = sorted(pieces.values())
  if ids != list(range(size)):
    raise ValueError(f'vocab.json has {len(pieces)} pieces with ids that are '
                     f'not 0..{size - 1} (config.json vocab_size={size}).')
  if '<unk>' not in pieces:
    raise ValueError('vocab.json has no <unk> piece.')
  special = [hf['pad_token_id'], hf['eos_token_id'], pieces['<unk>']]
  if len(set(special)) != 3:
    raise ValueError(f'Padding, EOS and unknown ids {special} are not '
                     'distinct.')
  rest = [i for i in range(size) if i not in special]
  return np.asarray(special + rest, np.int64)


def _linear(t: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
  """A PyTorch Linear ([out, in]) as a flax Dense ([in, out])."""
  return {'kernel': t[f'{prefix}.weight'].T, 'bias': t[f'{prefix}.bias']}


def _attention(t, prefix: str, num_heads: int):
  return files.torch_attention(
      t, {'query': f'{prefix}.q_proj', 'key': f'{prefix}.k_proj',
          'value': f'{prefix}.v_proj', 'out': f'{prefix}.out_proj'},
      num_heads)


def _layer_names(prefix: str, d: int, f: int, cross: bool
                 ) -> dict[str, tuple[int, ...]]:
  """The tensors of one encoder (or, with `cross`, decoder) layer."""
  names = {}
  attentions = ('self_attn', 'encoder_attn') if cross else ('self_attn',)
  for attention in attentions:
    for proj in ('q_proj', 'k_proj', 'v_proj', 'out_proj'):
      names[f'{prefix}.{attention}.{proj}.weight'] = (d, d)
      names[f'{prefix}.{attention}.{proj}.bias'] = (d,)
  for norm in [f'{a}_layer_norm' for a in attentions] + ['final_layer_norm']:
    names[f'{prefix}.{norm}.weight'] = (d,)
    names[f'{prefix}.{norm}.bias'] = (d,)
  names.update({f'{prefix}.fc1.weight': (f, d), f'{prefix}.fc1.bias': (f,),
                f'{prefix}.fc2.weight': (d, f), f'{prefix}.fc2.bias': (d,)})
  return names


def _without_copies(tensors: dict[str, np.ndarray],
                    config: encoder_decoder.Config) -> dict[str, np.ndarray]:
  """Drops what older checkpoints save beside the parameters, after checking
  it: the shared embedding's tied copies and the fixed sinusoid tables."""
  tensors = dict(tensors)
  shared = tensors.get('model.shared.weight')
  for name in ('model.encoder.embed_tokens.weight',
               'model.decoder.embed_tokens.weight', 'lm_head.weight'):
    copy = tensors.pop(name, None)
    if copy is not None and shared is not None and not np.array_equal(
        copy, shared):
      raise ValueError(f'{name} differs from model.shared.weight: the '
                       'checkpoint does not tie its embeddings, which our '
                       'Transformer needs.')
  table = positional.sinusoidal_encoding(config.max_length, config.d_model,
                                     layout='concatenated')
  for name in ('model.encoder.embed_positions.weight',
               'model.decoder.embed_positions.weight'):
    positions = tensors.pop(name, None)
    if positions is not None and (
        positions.shape != table.shape or
        not np.allclose(positions, table, atol=1e-5)):
      raise ValueError(f'{name} is not the concatenated sinusoid table of '
                       f'{table.shape}: learned positions are not supported.')
  return tensors


def params_from_hf(tensors: dict[str, np.ndarray],
                   config: encoder_decoder.Config,
                   order: np.ndarray) -> dict[str, Any]:
  """Our parameter tree from MarianMTModel's tensors, the vocabulary
  reordered by `order`; every name and shape checked.

  Raises:
    ValueError: listing missing, unexpected and mis-shaped tensors.
  """
  d, f, v = config.d_model, config.mlp_dim, config.vocab_size
  expected = {'model.shared.weight': (v, d), 'final_logits_bias': (1, v)}
  for i in range(config.num_layers):
    expected.update(_layer_names(f'model.encoder.layers.{i}', d, f, False))
    expected.update(_layer_names(f'model.decoder.layers.{i}', d, f, True))
  t = files.checked(_without_copies(tensors, config), expected, 'Marian')
  norm = lambda prefix: {'norm': files.torch_layer_norm(t, prefix)}
  n = config.num_heads

  def block(prefix: str, cross: bool) -> dict[str, Any]:
    ours = {'self_attention': _attention(t, f'{prefix}.self_attn', n),
            'attention_sublayer': norm(f'{prefix}.self_attn_layer_norm'),
            'mlp': {'wi': _linear(t, f'{prefix}.fc1'),
                    'wo': _linear(t, f'{prefix}.fc2')},
            'mlp_sublayer': norm(f'{prefix}.final_layer_norm')}
    if cross:
      ours['cross_attention'] = _attention(t, f'{prefix}.encoder_attn', n)
      ours['cross_attention_sublayer'] = norm(
          f'{prefix}.encoder_attn_layer_norm')
    return ours

  return {
      'embed': {'embed': {'embedding': t['model.shared.weight'][order]}},
      'final_logits_bias': t['final_logits_bias'][0][order],
      'encoder': {f'layer_{i}': block(f'model.encoder.layers.{i}', False)
                  for i in range(config.num_layers)},
      'decoder': {f'layer_{i}': block(f'model.decoder.layers.{i}', True)
                  for i in range(config.num_layers)}}


def load(directory: str) -> tuple[encoder_decoder.Config, dict[str, Any],
                                  list[str]]:
  """(config, parameters, pieces) of a Hugging Face Marian directory;
  `pieces[our_id]` is the vocabulary piece of each of our ids."""
  hf = files.read_config(directory)
  config = config_from_hf(hf)
  if os.path.exists(os.path.join(directory, 'target_vocab.json')):
    raise ValueError(f'{directory} has separate source and target '
                     'vocabularies; our Transformer shares one.')
  pieces = files.read_json(os.path.join(directory, VOCAB))
  order = vocabulary_order(hf, pieces)
  by_id = {i: piece for piece, i in pieces.items()}
  params = params_from_hf(files.read_safetensors(directory), config, order)
  return config, params, [by_id[int(i)] for i in order]
