"""MarianMT (Helsinki-NLP OPUS-MT) checkpoints in the Hugging Face layout
into `encoder_decoder.Transformer`, with their SentencePiece vocabularies.

Marian is the paper's post-LN encoder-decoder with a few options of ours
set: swish activations, sinusoids laid out as [sin... | cos...], a final
logits bias, LayerNorm epsilon 1e-5, one embedding shared by encoder,
decoder and softmax. Its ids differ from ours: EOS is 0, unknown 1 and
padding (also the decoder's start symbol) the last id, while our models use
padding 0 (the start symbol), EOS 1 and unknown 2. Conversion reorders the
vocabulary by the rule of every family (`published_ids.IdOrder`):
padding, EOS and unknown first, then the other ids in their order. The
embedding rows and the logits bias move the same way (`vocabulary_rows`),
so the model computes the same function and its logits are Marian's,
permuted.

`to_hf` is the inverse (`convert --to=hf`), for our own encoder-decoder
Transformers of Marian's shape too (post-LN, fixed sinusoids, one tied
embedding; `export_problems` names what else is refused). Sinusoids
interleaved as the paper lays them out, where Marian concatenates them,
export with the model width reordered, which computes the same function
(every layer, LayerNorm included, treats the features alike). Marian's
LayerNorms divide by sqrt(variance + 1e-5), whatever the model: a model
trained with a smaller epsilon (ours is 1e-6 by default) exports with
1e-5, which changes each normalised value by a factor within
1e-5 / (2 variance) of 1 (a tiny random model's logits, of size 1, moved
by 1e-5: tests/interop/test_export_marian.py); a larger epsilon is
refused. A converted workdir keeps its pieces in our order alone, so it
exports in OPUS-MT's numbering (`published_order`).

MarianConfig, field by field (transformers' defaults, `DEFAULTS`, stand
for the fields a config.json omits: its activation is 'gelu', although
OPUS-MT models name 'swish'):
- honoured: vocab_size, d_model, encoder_layers, encoder_attention_heads,
  encoder_ffn_dim (the decoder's must be equal), activation_function
  (`files.HF_ACTIVATIONS`), max_position_embeddings, scale_embedding,
  pad_token_id and eos_token_id (the vocabulary reorder); dropout and
  attention_dropout become the dropout rates of fine-tuning.
- refused unless they leave the computation ours (`REFUSED`, and in
  `checked_config` what relates two fields):
  share_encoder_decoder_embeddings, tie_word_embeddings, pruned_heads, an
  odd d_model (sinusoids pair sin and cos), a decoder_vocab_size,
  decoder_layers, decoder_attention_heads or decoder_ffn_dim other than
  the encoder's, a decoder_start_token_id other than pad_token_id; and the
  fields of configs written for the BART code Marian shared before
  transformers 5: static_position_embeddings, normalize_before,
  normalize_embedding, add_final_layer_norm.
- ignored, as they do not change the logits: activation_dropout,
  encoder_layerdrop, decoder_layerdrop (training only), init_std,
  use_cache, is_encoder_decoder, is_decoder (MarianForCausalLM's, whose
  checkpoints have no encoder and are refused by their tensors),
  bos_token_id, forced_eos_token_id and the generation settings old
  configs hold (num_beams, max_length, bad_words_ids, ...), old fields
  without effect (add_bias_logits: the final logits bias is always there;
  extra_pos_embeddings, classif_dropout, num_labels,
  gradient_checkpointing), and every model's architectures,
  transformers_version, dtype, output_*, return_dict,
  chunk_size_feed_forward, id2label, label2id and problem_type.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from transformer.core import positional
from transformer.data import published_ids
from transformer.interop import files
from transformer.interop import vocabulary_rows
from transformer.models import encoder_decoder

# What a Marian directory holds besides the weights.
SOURCE_SPM, TARGET_SPM, VOCAB = 'source.spm', 'target.spm', 'vocab.json'


# MarianConfig's defaults of the fields that change the computation.
DEFAULTS = dict(
    vocab_size=58_101, decoder_vocab_size=None, max_position_embeddings=1_024,
    encoder_layers=12, encoder_ffn_dim=4_096, encoder_attention_heads=16,
    decoder_layers=12, decoder_ffn_dim=4_096, decoder_attention_heads=16,
    activation_function='gelu', d_model=1_024, dropout=0.1,
    attention_dropout=0.0, decoder_start_token_id=58_100,
    scale_embedding=False, pad_token_id=58_100, eos_token_id=0,
    share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
# field -> (values that compute what we do, what others make Marian
# compute); the last four are fields of configs written for the BART code
# Marian shared before transformers 5.
REFUSED = {
    'share_encoder_decoder_embeddings': ((True,), 'separate source and '
                                         'target embeddings'),
    'tie_word_embeddings': ((True,), 'an output projection of its own '
                            'instead of the shared embedding'),
    'static_position_embeddings': ((True,), 'learned positions'),
    'normalize_before': ((False,), 'pre-LN layers'),
    'normalize_embedding': ((False,), 'a LayerNorm on the embeddings'),
    'add_final_layer_norm': ((False,), 'final LayerNorms'),
}
# Decoder fields that must equal the encoder's: our Transformer has one size
# for both, and one vocabulary.
_SAME = {'decoder_layers': 'encoder_layers',
         'decoder_attention_heads': 'encoder_attention_heads',
         'decoder_ffn_dim': 'encoder_ffn_dim',
         'decoder_vocab_size': 'vocab_size',
         'decoder_start_token_id': 'pad_token_id'}


def checked_config(hf: dict[str, Any]) -> dict[str, Any]:
  """A Marian config.json with the reference's defaults, checked.

  Raises:
    ValueError: another model type, naming each refused field.
  """
  hf, _ = files.hf_config(hf, 'marian', DEFAULTS, REFUSED,
                          'activation_function')
  hf['decoder_vocab_size'] = hf['decoder_vocab_size'] or hf['vocab_size']
  for field, encoder_field in _SAME.items():
    if hf[field] != hf[encoder_field]:
      raise ValueError(f'{field}={hf[field]} is not supported (ours has '
                       f'{field} = {encoder_field}, here {hf[encoder_field]})'
                       ': no exact conversion exists, choose another '
                       'checkpoint.')
  if hf['d_model'] % 2:
    raise ValueError(f"d_model={hf['d_model']} is not supported (odd: our "
                     'sinusoids pair sin and cos): no exact conversion '
                     'exists, choose another checkpoint.')
  return hf


def config_from_hf(hf: dict[str, Any]) -> encoder_decoder.Config:
  """Our encoder-decoder config for a MarianMT config.json.

  Raises:
    ValueError: another model type, or naming each refused field.
  """
  hf = checked_config(hf)
  return encoder_decoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['max_position_embeddings'],
      num_layers=hf['encoder_layers'], d_model=hf['d_model'],
      num_heads=hf['encoder_attention_heads'], d_ff=hf['encoder_ffn_dim'],
      activation=files.HF_ACTIVATIONS[hf['activation_function']],
      norm_position='post', positional_encoding='sinusoidal',
      sinusoidal_layout='concatenated',
      scale_embeddings=hf['scale_embedding'], final_logits_bias=True,
      layer_norm_epsilon=1e-5, dropout_rate=hf['dropout'],
      attention_dropout_rate=hf['attention_dropout'])


def vocabulary_order(hf: dict[str, Any], pieces: dict[str, int]
                     ) -> published_ids.IdOrder:
  """Our ids of Marian's: padding, EOS, unknown, then the rest.

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
  return published_ids.IdOrder.of(size, pad=hf['pad_token_id'],
                                  eos=hf['eos_token_id'], unk=pieces['<unk>'])


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
                   ids: published_ids.IdOrder) -> dict[str, Any]:
  """Our parameter tree from MarianMTModel's tensors in our `ids`; every
  name and shape checked.

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

  return vocabulary_rows.in_our_ids({
      'embed': {'embed': {'embedding': t['model.shared.weight']}},
      'final_logits_bias': t['final_logits_bias'][0],
      'encoder': {f'layer_{i}': block(f'model.encoder.layers.{i}', False)
                  for i in range(config.num_layers)},
      'decoder': {f'layer_{i}': block(f'model.decoder.layers.{i}', True)
                  for i in range(config.num_layers)}}, ids)


def load(directory: str) -> tuple[encoder_decoder.Config, dict[str, Any],
                                  list[str]]:
  """(config, parameters, pieces) of a Hugging Face Marian directory;
  `pieces[our_id]` is the vocabulary piece of each of our ids."""
  hf = files.config_of(directory, checked_config)
  config = config_from_hf(hf)
  if os.path.exists(os.path.join(directory, 'target_vocab.json')):
    raise ValueError(f'{directory} has separate source and target '
                     'vocabularies; our Transformer shares one.')
  pieces = files.read_json(os.path.join(directory, VOCAB))
  ids = vocabulary_order(hf, pieces)
  by_id = {i: piece for piece, i in pieces.items()}
  params = params_from_hf(files.read_safetensors(directory), config, ids)
  return config, params, [by_id[int(i)] for i in ids.order]


# -- Export: our Transformer in MarianMTModel's layout ----------------------

# Our activations -> Marian's names of the same function (OPUS-MT names
# 'swish').
_HF_ACTIVATIONS = {'swish': 'swish', 'relu': 'relu', 'gelu': 'gelu_new',
                   'gelu_exact': 'gelu'}
# The epsilon of every LayerNorm of transformers' Marian (torch's default).
LAYER_NORM_EPSILON = 1e-5


def published_order(size: int) -> published_ids.IdOrder:
  """The ids OPUS-MT numbers its vocabulary with (EOS 0, unknown 1, the
  other pieces in order, padding last), from ours: a converted workdir
  keeps its pieces in our order alone, so export numbers them so; a
  checkpoint that numbered them otherwise exports to the same model with
  its vocabulary numbered the OPUS-MT way."""
  return published_ids.IdOrder.of(size, pad=size - 1, eos=0, unk=1)


def export_problems(config: Any) -> list[str]:
  """The settings of `config` that Marian does not compute, one phrase
  each (none: the model exports, `to_hf`)."""
  if not isinstance(config, encoder_decoder.Config):
    return [f'{type(config).__module__}.{type(config).__qualname__} (Marian '
            f'is a Transformer encoder-decoder)']
  head_size = config.d_model // config.num_heads
  checks = (
      ('norm_position', config.norm_position == 'post',
       'Marian normalises after each sublayer'),
      ('norm', config.norm == 'layer', 'Marian has LayerNorm'),
      ('positional_encoding', config.positional_encoding == 'sinusoidal',
       'Marian adds fixed sinusoids'),
      ('tie_embeddings', config.tie_embeddings,
       "an output projection of its own; Marian's softmax reads the shared "
       'embedding'),
      ('activation', config.activation in _HF_ACTIVATIONS,
       'a gated MLP; Marian has one dense layer before its activation'),
      ('num_kv_heads', config.num_kv_heads in (None, config.num_heads),
       'keys and values shared by groups of query heads'),
      ('head_dim', config.head_dim in (None, head_size),
       f'heads of another width than d_model/num_heads={head_size}'),
      ('value_head_dim',
       config.value_head_dim in (None, config.head_dim or head_size),
       'values of another width than keys'),
      ('layer_norm_epsilon', config.layer_norm_epsilon <= LAYER_NORM_EPSILON,
       f"Marian's LayerNorms have epsilon {LAYER_NORM_EPSILON}, which only "
       f'a model of a smaller one follows closely'))
  return [f'{field}={getattr(config, field)!r} ({reason})'
          for field, ok, reason in checks if not ok]


def _torch_norm(prefix: str, sublayer: dict[str, Any]
                ) -> dict[str, np.ndarray]:
  norm = sublayer['norm']
  return {f'{prefix}.weight': norm['scale'], f'{prefix}.bias': norm['bias']}


def _attention_tensors(prefix: str, attention: dict[str, Any]
                       ) -> dict[str, np.ndarray]:
  tensors = {}
  for ours, theirs in (('query', 'q_proj'), ('key', 'k_proj'),
                       ('value', 'v_proj')):
    tensors.update(files.torch_linear(f'{prefix}.{theirs}', attention[ours]))
  tensors.update(files.torch_linear(f'{prefix}.out_proj', attention['out'], 2))
  return tensors


def _layer_tensors(prefix: str, ours: dict[str, Any]
                   ) -> dict[str, np.ndarray]:
  """One encoder (or, with cross-attention, decoder) layer as Marian's."""
  tensors = {
      **_attention_tensors(f'{prefix}.self_attn', ours['self_attention']),
      **_torch_norm(f'{prefix}.self_attn_layer_norm',
                    ours['attention_sublayer']),
      **files.torch_linear(f'{prefix}.fc1', ours['mlp']['wi']),
      **files.torch_linear(f'{prefix}.fc2', ours['mlp']['wo']),
      **_torch_norm(f'{prefix}.final_layer_norm', ours['mlp_sublayer'])}
  if 'cross_attention' in ours:
    tensors.update({
        **_attention_tensors(f'{prefix}.encoder_attn',
                             ours['cross_attention']),
        **_torch_norm(f'{prefix}.encoder_attn_layer_norm',
                      ours['cross_attention_sublayer'])})
  return tensors


# The axis of the model width in each Marian tensor, by its module's and
# its own name (the end of the tensor's name); every LayerNorm's is 0.
_WIDTH_AXIS = {('shared', 'weight'): 1, ('q_proj', 'weight'): 1,
               ('k_proj', 'weight'): 1, ('v_proj', 'weight'): 1,
               ('out_proj', 'weight'): 0, ('out_proj', 'bias'): 0,
               ('fc1', 'weight'): 1, ('fc2', 'weight'): 0, ('fc2', 'bias'): 0}


def _concatenated_sinusoids(tensors: dict[str, np.ndarray], d_model: int
                            ) -> dict[str, np.ndarray]:
  """A model of interleaved sinusoids (sin, cos of one frequency side by
  side) with its width reordered so that they sit concatenated ([sin... |
  cos...]), as Marian adds them: the same function, features renamed."""
  order = np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
  moved = {}
  for name, value in tensors.items():
    path, _, kind = name.rpartition('.')
    module = path.rpartition('.')[2]
    axis = 0 if module.endswith('layer_norm') else _WIDTH_AXIS.get(
        (module, kind))
    moved[name] = value if axis is None else np.take(value, order, axis=axis)
  return moved


def to_hf(params: dict[str, Any], config: encoder_decoder.Config,
          ids: published_ids.IdOrder | None = None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a MarianConfig
  dict and tensors named as MarianMTModel saves them (the one shared
  embedding, which Marian ties to encoder, decoder and softmax, and the
  final logits bias, zero for a model without one).

  Args:
    params: our parameters, in our ids.
    config: the model's.
    ids: our ids -> the published ones (a converted workdir's,
      `published_order`); None: ours are the published ids (a vocabulary
      built here: padding 0, EOS 1, unknown 2).

  Raises:
    ValueError: naming each setting Marian does not compute
      (`export_problems`).
  """
  problems = export_problems(config)
  if problems:
    raise ValueError('; '.join(problems) + ': Marian cannot compute this '
                     'model, so it does not export; export a translation '
                     'Transformer trained without these settings.')
  if 'final_logits_bias' not in params:
    params = {**params, 'final_logits_bias': np.zeros(config.vocab_size,
                                                      np.float32)}
  if ids is not None:
    if ids.added_padding:
      raise ValueError('The id order adds padding, which Marian\'s '
                       'vocabulary has: give `published_order(vocab_size)`, '
                       'or None for a vocabulary built here.')
    params = vocabulary_rows.in_published_ids(params, ids)
  tensors = {'model.shared.weight': params['embed']['embed']['embedding'],
             'final_logits_bias': np.asarray(params['final_logits_bias'])[
                 None]}
  for side in ('encoder', 'decoder'):
    for i in range(config.num_layers):
      tensors.update(_layer_tensors(f'model.{side}.layers.{i}',
                                    params[side][f'layer_{i}']))
  if config.sinusoidal_layout == 'interleaved':
    tensors = _concatenated_sinusoids(tensors, config.d_model)
  return (_hf_config(config, ids),
          {name: np.ascontiguousarray(np.asarray(value, np.float32))
           for name, value in tensors.items()})


def _hf_config(config: encoder_decoder.Config,
               ids: published_ids.IdOrder | None) -> dict[str, Any]:
  """MarianConfig's fields: one size for encoder and decoder, and the
  special ids (padding also starts the decoder) in the published ids."""
  pad, eos = (0, 1) if ids is None else (int(ids.order[0]),
                                         int(ids.order[1]))
  hf = {'model_type': 'marian', 'architectures': ['MarianMTModel'],
        'vocab_size': config.vocab_size,
        'decoder_vocab_size': config.vocab_size, 'd_model': config.d_model,
        'max_position_embeddings': config.max_length,
        'activation_function': _HF_ACTIVATIONS[config.activation],
        'scale_embedding': config.scale_embeddings,
        'dropout': config.dropout_rate,
        'attention_dropout': config.attention_dropout_rate,
        'activation_dropout': 0.0, 'pad_token_id': pad, 'eos_token_id': eos,
        'decoder_start_token_id': pad, 'forced_eos_token_id': eos,
        'share_encoder_decoder_embeddings': True, 'tie_word_embeddings': True,
        'is_encoder_decoder': True}
  for side in ('encoder', 'decoder'):
    hf.update({f'{side}_layers': config.num_layers,
               f'{side}_attention_heads': config.num_heads,
               f'{side}_ffn_dim': config.mlp_dim})
  return hf
