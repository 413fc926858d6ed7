"""Every config field of GPT-2, BERT, ViT and Marian that changes the
computation is honoured or refused by name: with a field set, a small
randomised reference model saved as published and read by our loader gives
transformers' logits, or the loader refuses it naming the field (and without
the refusal the logits would differ, or the tensors be refused). Fields a
config.json omits take transformers' defaults. Skipped without `torch` and
`transformers` (`pip install -e ".[interop]"`)."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from conftest import randomised
from transformer import layers
from transformer.interop import bert
from transformer.interop import files
from transformer.interop import gpt2
from transformer.interop import marian
from transformer.interop import vit as vit_interop
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import vit

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

VOCAB = 40
# Small sizes of each family (the fields under test come on top).
SMALL = {
    'gpt2': dict(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2,
                 n_head=4),
    'bert': dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=48,
                 max_position_embeddings=16),
    'vit': dict(image_size=16, patch_size=4, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, num_labels=3),
    'marian': dict(vocab_size=VOCAB, d_model=32, encoder_layers=2,
                   decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=48,
                   decoder_ffn_dim=48, max_position_embeddings=16,
                   pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1,
                   eos_token_id=0),
}
REFERENCES = {'gpt2': 'GPT2LMHeadModel', 'bert': 'BertForPreTraining',
              'vit': 'ViTForImageClassification', 'marian': 'MarianMTModel'}
CONFIGS = {'gpt2': 'GPT2Config', 'bert': 'BertConfig', 'vit': 'ViTConfig',
           'marian': 'MarianConfig'}
MODULES = {'gpt2': gpt2, 'bert': bert, 'vit': vit_interop, 'marian': marian}


def publish(directory, family, **fields):
  """A randomised reference model of `family` with `fields` set, saved as
  published (with Marian's vocab.json); returns the model."""
  config = getattr(transformers, CONFIGS[family])(**{**SMALL[family],
                                                     **fields})
  torch.manual_seed(0)
  model = randomised(getattr(transformers, REFERENCES[family])(config))
  model.save_pretrained(directory)
  if family == 'marian':
    pieces = ['</s>', '<unk>'] + [f'p{i}' for i in range(2, VOCAB - 1)]
    with open(os.path.join(directory, 'vocab.json'), 'w') as f:
      json.dump({p: i for i, p in enumerate(pieces + ['<pad>'])}, f)
  return model


def _gpt2_logits(reference, directory):
  config, params = gpt2.load(directory)
  tokens = np.random.default_rng(0).integers(0, VOCAB, (2, 12))
  ours = decoder.Decoder(config).apply({'params': params},
                                       jnp.asarray(tokens),
                                       deterministic=True)
  return ours, reference(torch.tensor(tokens)).logits


def _bert_logits(reference, directory):
  config, params = bert.load(directory)
  tokens = np.random.default_rng(0).integers(1, VOCAB, (2, 12))
  types = (np.arange(12) >= 6).astype(np.int64)[None].repeat(2, 0)
  types %= config.type_vocab_size
  ours = encoder.Bert(config).apply(
      {'params': params}, jnp.asarray(tokens), token_types=jnp.asarray(types),
      deterministic=True, method='mlm_logits')
  return ours, reference(torch.tensor(tokens), token_type_ids=torch.tensor(
      types)).prediction_logits


def _vit_logits(reference, directory):
  config, params = vit_interop.load(directory)
  images = np.random.default_rng(0).standard_normal(
      (2, config.image_size, config.image_size, config.num_channels)
  ).astype(np.float32)
  ours = vit.VisionTransformer(config).apply(
      {'params': params}, jnp.asarray(images), deterministic=True)
  return ours, reference(torch.tensor(images.transpose(0, 3, 1, 2))).logits


def _marian_logits(reference, directory):
  """Our logits, and Marian's in our vocabulary order (`marian.load`)."""
  config, params, pieces = marian.load(directory)
  order = np.asarray([int(p[1:]) if p.startswith('p') else
                      {'<pad>': VOCAB - 1, '</s>': 0, '<unk>': 1}[p]
                      for p in pieces])
  rng = np.random.default_rng(0)
  inputs, targets = rng.integers(1, VOCAB, (2, 10)), rng.integers(
      1, VOCAB, (2, 7))
  ours = encoder_decoder.Transformer(config).apply(
      {'params': params}, jnp.asarray(inputs), jnp.asarray(targets),
      deterministic=True)
  decoder_inputs = np.asarray(layers.shift_right(jnp.asarray(targets)))
  theirs = reference(input_ids=torch.tensor(order[inputs]),
                     decoder_input_ids=torch.tensor(order[decoder_inputs]))
  return ours, theirs.logits[..., order]


LOGITS = {'gpt2': _gpt2_logits, 'bert': _bert_logits, 'vit': _vit_logits,
          'marian': _marian_logits}


def relative_error(family, reference, directory) -> float:
  """max |ours - reference| / max |reference| of the family's logits."""
  with torch.no_grad():
    ours, theirs = LOGITS[family](reference, directory)
  theirs = theirs.numpy()
  return float(np.abs(np.asarray(ours) - theirs).max() /
               np.abs(theirs).max())


HONOURED = [
    ('gpt2', {}), ('gpt2', dict(n_inner=24)),
    ('gpt2', dict(layer_norm_epsilon=0.5)),
    *[('gpt2', dict(activation_function=name))
      for name in files.HF_ACTIVATIONS],
    ('bert', {}), ('bert', dict(intermediate_size=24)),
    ('bert', dict(layer_norm_eps=0.5)), ('bert', dict(type_vocab_size=3)),
    ('bert', dict(hidden_act='relu')), ('bert', dict(hidden_act='gelu_new')),
    ('bert', dict(hidden_act='silu')),
    ('vit', {}), ('vit', dict(layer_norm_eps=0.5)),
    ('vit', dict(image_size=[16, 16], patch_size=[8, 8])),
    ('vit', dict(num_channels=1)), ('vit', dict(num_labels=5)),
    ('vit', dict(hidden_act='gelu_new')), ('vit', dict(hidden_act='relu')),
    ('marian', {}), ('marian', dict(scale_embedding=True)),
    ('marian', dict(activation_function='swish')),
    ('marian', dict(activation_function='relu')),
    ('marian', dict(activation_function='gelu_new')),
    ('marian', dict(max_position_embeddings=24)),
]
# Fields that do not change the logits (listed as ignored by the loaders).
IGNORED = [
    ('gpt2', dict(reorder_and_upcast_attn=True,
                  attn_implementation='eager')),
    ('gpt2', dict(embd_pdrop=0.5, summary_type='mean', pad_token_id=3)),
    ('bert', dict(chunk_size_feed_forward=3, pad_token_id=5,
                  classifier_dropout=0.5)),
    ('vit', dict(encoder_stride=4, pooler_act='relu', pooler_output_size=8)),
    ('marian', dict(activation_dropout=0.5, encoder_layerdrop=0.5,
                    is_decoder=True, forced_eos_token_id=None)),
]


def _id(case):
  family, fields = case
  return f'{family}-' + ('-'.join(f'{k}={v}' for k, v in fields.items())
                         or 'defaults')


@pytest.mark.parametrize('case', HONOURED + IGNORED, ids=_id)
def test_honoured_and_ignored_fields_give_the_reference_logits(case,
                                                               tmp_path):
  family, fields = case
  reference = publish(str(tmp_path), family, **fields)
  assert relative_error(family, reference, str(tmp_path)) < 2e-5


# Honoured fields whose value changes the logits: with the field left out
# of config.json (its default applied), the loader reads another model.
MATTERS = [
    ('gpt2', dict(n_inner=24)), ('gpt2', dict(layer_norm_epsilon=0.5)),
    ('gpt2', dict(activation_function='relu')),
    ('bert', dict(layer_norm_eps=0.5)), ('bert', dict(type_vocab_size=3)),
    ('bert', dict(hidden_act='relu')), ('vit', dict(layer_norm_eps=0.5)),
    ('vit', dict(num_channels=1)), ('vit', dict(hidden_act='relu')),
    ('marian', dict(scale_embedding=True)),
    ('marian', dict(activation_function='swish')),
]


@pytest.mark.parametrize('case', MATTERS, ids=_id)
def test_the_honoured_fields_change_the_logits(case, tmp_path):
  """The comparisons above see each field: without it, the logits differ
  or the tensors no longer fit."""
  family, fields = case
  reference = publish(str(tmp_path), family, **fields)
  path = tmp_path / 'config.json'
  path.write_text(json.dumps({k: v for k, v in json.loads(
      path.read_text()).items() if k not in fields}))
  try:
    error = relative_error(family, reference, str(tmp_path))
  except ValueError as e:
    assert 'does not match' in str(e)
  else:
    assert error > 1e-3


@pytest.mark.parametrize('family', list(SMALL))
def test_fields_a_config_omits_take_the_reference_defaults(family, tmp_path):
  """A config.json of only the fields that differ from transformers'
  defaults (as old ones are) computes what the reference computes."""
  reference = publish(str(tmp_path), family)
  defaults = getattr(transformers, CONFIGS[family])().to_dict()
  path = tmp_path / 'config.json'
  written = json.loads(path.read_text())
  kept = {k: v for k, v in written.items()
          if k == 'model_type' or defaults.get(k, object()) != v}
  assert set(kept) < set(written)  # the defaults were left out
  path.write_text(json.dumps(kept))
  assert relative_error(family, reference, str(tmp_path)) < 2e-5


@pytest.mark.parametrize('family', list(SMALL))
def test_loader_defaults_are_the_references(family):
  reference = getattr(transformers, CONFIGS[family])()
  for field, value in MODULES[family].DEFAULTS.items():
    expected = getattr(reference, field)
    if family == 'marian' and field == 'decoder_vocab_size':
      expected = None  # the reference derives it from vocab_size, as we do
    assert value == expected, field


# (family, fields, the field the refusal names).
REFUSED = [
    ('gpt2', dict(scale_attn_weights=False), 'scale_attn_weights'),
    ('gpt2', dict(scale_attn_by_inverse_layer_idx=True),
     'scale_attn_by_inverse_layer_idx'),
    ('gpt2', dict(add_cross_attention=True), 'add_cross_attention'),
    ('gpt2', dict(tie_word_embeddings=False), 'tie_word_embeddings'),
    ('gpt2', dict(activation_function='quick_gelu'), 'activation_function'),
    ('gpt2', dict(pruned_heads={'0': [1]}), 'pruned_heads'),
    ('bert', dict(is_decoder=True), 'is_decoder'),
    ('bert', dict(add_cross_attention=True), 'add_cross_attention'),
    ('bert', dict(tie_word_embeddings=False), 'tie_word_embeddings'),
    ('bert', dict(position_embedding_type='relative_key'),
     'position_embedding_type'),
    ('bert', dict(hidden_act='gelu_10'), 'hidden_act'),
    ('vit', dict(qkv_bias=False), 'qkv_bias'),
    ('vit', dict(image_size=[16, 32]), 'image_size'),
    ('vit', dict(patch_size=[4, 8]), 'patch_size'),
    ('vit', dict(hidden_act='tanh'), 'hidden_act'),
    ('marian', dict(share_encoder_decoder_embeddings=False),
     'share_encoder_decoder_embeddings'),
    ('marian', dict(tie_word_embeddings=False), 'tie_word_embeddings'),
    ('marian', dict(decoder_layers=3), 'decoder_layers'),
    ('marian', dict(decoder_attention_heads=2), 'decoder_attention_heads'),
    ('marian', dict(decoder_ffn_dim=24), 'decoder_ffn_dim'),
    ('marian', dict(decoder_vocab_size=VOCAB + 1), 'decoder_vocab_size'),
    ('marian', dict(decoder_start_token_id=0), 'decoder_start_token_id'),
    ('marian', dict(d_model=33, encoder_attention_heads=3,
                    decoder_attention_heads=3), 'd_model'),
    ('marian', dict(activation_function='mish'), 'activation_function'),
    ('marian', dict(static_position_embeddings=False),
     'static_position_embeddings'),
    ('marian', dict(normalize_before=True), 'normalize_before'),
    ('marian', dict(normalize_embedding=True), 'normalize_embedding'),
    ('marian', dict(add_final_layer_norm=True), 'add_final_layer_norm'),
]


@pytest.mark.parametrize('case', REFUSED, ids=lambda c: _id(c[:2]))
def test_refused_fields_are_named(case):
  family, fields, named = case
  with pytest.raises(ValueError) as error:
    MODULES[family].config_from_hf({'model_type': family, **SMALL[family],
                                    **fields})
  message = str(error.value)
  assert f'{named}=' in message and 'is not supported' in message
  assert '\n' not in message


# Refused fields that transformers 5 implements: without the refusal the
# logits would differ, or the tensors be refused. (With add_cross_attention
# the reference skips its cross-attention layers when given no encoder
# states, but they are not ours: the tensors refuse them.)
WOULD_DIFFER = [
    ('gpt2', dict(scale_attn_weights=False)),
    ('gpt2', dict(scale_attn_by_inverse_layer_idx=True)),
    ('gpt2', dict(add_cross_attention=True)),
    ('gpt2', dict(tie_word_embeddings=False)),
    ('bert', dict(is_decoder=True)),
    ('bert', dict(is_decoder=True, add_cross_attention=True)),
    ('bert', dict(tie_word_embeddings=False)),
    ('vit', dict(qkv_bias=False)),
    ('marian', dict(share_encoder_decoder_embeddings=False)),
    ('marian', dict(tie_word_embeddings=False)),
]


@pytest.mark.parametrize('case', WOULD_DIFFER, ids=_id)
def test_without_the_refusal_the_logits_would_differ(case, tmp_path,
                                                     monkeypatch):
  family, fields = case
  reference = publish(str(tmp_path), family, **fields)
  for field in fields:
    monkeypatch.delitem(MODULES[family].REFUSED, field)
  try:
    error = relative_error(family, reference, str(tmp_path))
  except ValueError as e:  # the tensors are refused instead
    assert any(word in str(e) for word in ('differs', 'missing',
                                           'unexpected')), e
  else:
    assert error > 1e-4


def test_a_refused_checkpoint_is_named_with_its_file(tmp_path):
  publish(str(tmp_path), 'gpt2', scale_attn_by_inverse_layer_idx=True)
  with pytest.raises(ValueError) as error:
    gpt2.load(str(tmp_path))
  assert str(error.value).startswith(str(tmp_path / 'config.json') + ': ')
  assert 'scale_attn_by_inverse_layer_idx=True is not supported' in str(
      error.value)


def test_an_untied_lm_head_is_refused_by_its_tensors(tmp_path):
  """A checkpoint whose lm_head differs from wte, though its config says
  they are tied (edited by hand), is refused rather than dropped."""
  publish(str(tmp_path), 'gpt2')
  tensors = files.read_safetensors(str(tmp_path))
  tensors['lm_head.weight'] = tensors['transformer.wte.weight'] + 1
  config = gpt2.config_from_hf(files.read_config(str(tmp_path)))
  with raises_naming(ValueError, 'lm_head.weight', 'wte.weight'):
    gpt2.params_from_hf(tensors, config)
