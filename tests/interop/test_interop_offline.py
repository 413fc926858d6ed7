"""Checkpoint conversion without torch or transformers (the CI machine has
neither): Marian's tensor mapping and vocabulary reorder, and the Marian
tokenizer (the convert command: e2e/test_interop_offline_e2e.py). The
comparisons against the reference implementations are in
test_interop_marian.py and friends."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import sentencepiece as spm

from conftest import raises_naming
from transformer.core import masks
from transformer.core import positional
from transformer.data import published_ids
from transformer.data import published_tokenizers
from transformer.data.generated import offline_mt
from transformer.interop import bert
from transformer.interop import gpt2
from transformer.interop import marian
from transformer.interop import vocabulary_rows
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder

HF = dict(model_type='marian', vocab_size=40, d_model=16, encoder_layers=2,
          decoder_layers=2, encoder_attention_heads=2,
          decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24,
          max_position_embeddings=32, activation_function='swish',
          scale_embedding=True, pad_token_id=39, eos_token_id=0,
          decoder_start_token_id=39)


def marian_tensors(config, rng):
  """Random tensors under MarianMTModel's names and shapes."""
  d, f, v = config.d_model, config.mlp_dim, config.vocab_size
  names = {'model.shared.weight': (v, d), 'final_logits_bias': (1, v)}
  for i in range(config.num_layers):
    names.update(marian._layer_names(f'model.encoder.layers.{i}', d, f,
                                     False))
    names.update(marian._layer_names(f'model.decoder.layers.{i}', d, f,
                                     True))
  return {k: rng.normal(size=s).astype(np.float32) for k, s in names.items()}


def test_marian_tensors_fill_our_model_with_the_vocabulary_reordered():
  config = marian.config_from_hf(HF)
  assert (config.sinusoidal_layout, config.final_logits_bias,
          config.activation, config.layer_norm_epsilon) == (
              'concatenated', True, 'swish', 1e-5)
  pieces = {'</s>': 0, '<unk>': 1, **{f'p{i}': i for i in range(2, 39)},
            '<pad>': 39}
  order = marian.vocabulary_order(HF, pieces)
  np.testing.assert_array_equal(order.order[:4], [39, 0, 1, 2])
  tensors = marian_tensors(config, np.random.default_rng(0))
  params = marian.params_from_hf(tensors, config, order)
  tokens = jnp.ones((1, 4), jnp.int32)
  expected = nn.unbox(encoder_decoder.Transformer(config).init(
      jax.random.key(0), tokens, tokens, deterministic=True)['params'])
  shape = lambda tree: jax.tree.map(np.shape, tree)
  assert shape(params) == shape(expected)
  table = params['embed']['embed']['embedding']
  np.testing.assert_array_equal(table[0], tensors['model.shared.weight'][39])
  np.testing.assert_array_equal(table[5], tensors['model.shared.weight'][4])
  np.testing.assert_array_equal(params['final_logits_bias'][1],
                                tensors['final_logits_bias'][0, 0])
  # torch Linear [out, in] -> our [in, heads, head_dim]
  query = params['encoder']['layer_1']['self_attention']['query']['kernel']
  np.testing.assert_array_equal(
      query.reshape(16, 16),
      tensors['model.encoder.layers.1.self_attn.q_proj.weight'].T)


def test_marian_checkpoint_problems_are_named():
  config = marian.config_from_hf(HF)
  pieces = {'</s>': 0, '<unk>': 1, **{f'p{i}': i for i in range(2, 39)},
            '<pad>': 39}
  order = marian.vocabulary_order(HF, pieces)
  tensors = marian_tensors(config, np.random.default_rng(0))
  broken = dict(tensors)
  del broken['model.decoder.layers.1.fc2.bias']
  broken['model.encoder.layers.0.fc1.weight'] = np.zeros((3, 16), np.float32)
  with raises_naming(ValueError, 'missing model.decoder.layers.1.fc2.bias',
                     'model.encoder.layers.0.fc1.weight', 'expected (24, 16)',
                     'found (3, 16)'):
    marian.params_from_hf(broken, config, order)
  learned = {**tensors, 'model.encoder.embed_positions.weight':
             np.zeros((32, 16), np.float32)}
  with raises_naming(ValueError, 'model.encoder.embed_positions.weight',
                     'learned positions'):
    marian.params_from_hf(learned, config, order)
  sinusoids = positional.sinusoidal_encoding(32, 16, layout='concatenated')
  fixed = {**tensors, 'model.decoder.embed_positions.weight': sinusoids,
           'lm_head.weight': tensors['model.shared.weight']}
  marian.params_from_hf(fixed, config, order)  # checked, then dropped
  untied = {**tensors, 'lm_head.weight': tensors['model.shared.weight'] + 1}
  with raises_naming(ValueError, 'lm_head.weight', 'model.shared.weight'):
    marian.params_from_hf(untied, config, order)
  for change, named in ((dict(normalize_before=True),
                         ('normalize_before=True', 'pre-LN')),
                        (dict(decoder_layers=3),
                         ('decoder_layers=3', 'encoder_layers')),
                        (dict(decoder_start_token_id=0),
                         ('decoder_start_token_id=0', 'pad_token_id'))):
    with raises_naming(ValueError, *named, 'choose another checkpoint'):
      marian.config_from_hf({**HF, **change})
  with raises_naming(ValueError, 'pad=1', 'eos=0', 'unk=1', 'distinct'):
    marian.vocabulary_order({**HF, 'pad_token_id': 1}, pieces)


def test_marian_tokenizer_uses_our_ids(tmp_path):
  pairs = offline_mt.splits(200, 10, 10, seed=0)['train']
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter([s for s, _ in pairs]),
      model_prefix=str(tmp_path / 'source'), vocab_size=80,
      hard_vocab_limit=False, minloglevel=2)
  model = str(tmp_path / 'source.model')
  processor = spm.SentencePieceProcessor(model_file=model)
  pieces = ['<pad>', '</s>', '<unk>', '>>es<<'] + [
      processor.id_to_piece(i) for i in range(3, processor.vocab_size())]
  published_tokenizers.MarianTokenizer.save(str(tmp_path / 'vocab'), model,
                                            model, pieces)
  tokenizer = published_tokenizers.MarianTokenizer(str(tmp_path / 'vocab'))
  sentence = pairs[0][0]
  ids = tokenizer.encode(sentence)
  assert ids[-1] == 1 and 0 not in ids and 2 not in ids
  assert [tokenizer.id_to_piece(i) for i in ids[:-1]] == processor.encode(
      sentence, out_type=str)
  assert tokenizer.decode(ids + [7, 0]) == sentence
  coded = tokenizer.encode('>>es<<' + sentence)
  assert coded[0] == 3 and coded[1:] == ids
  assert 2 in tokenizer.encode('zzz qqq')  # pieces outside the vocabulary
  with raises_naming(FileNotFoundError, 'marian_pieces.json',
                     'transformer.tools.convert --from=hf'):
    published_tokenizers.MarianTokenizer(str(tmp_path))


def test_a_decoder_in_our_ids_masks_padding_and_round_trips():
  """EOS anywhere in the published vocabulary (here 4 of 7, as community
  GPT-2 tokenizers that put special tokens first have it)."""
  config = decoder.config_for('tiny', vocab_size=7, max_length=8)
  tokens = jnp.asarray([[4, 2, 3, 0]])
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), tokens, deterministic=True)['params'])
  ids = published_ids.IdOrder.of(7, eos=4)
  ours_config, ours = vocabulary_rows.decoder_in_our_ids(config, params, ids)
  assert ours_config.vocab_size == 8 and ours_config.mask_padding
  logits = decoder.Decoder(config).apply({'params': params}, tokens,
                                         deterministic=True)
  # Published ids 4 (EOS), 2, 3, 0 are ours 1, 4, 5, 2.
  np.testing.assert_array_equal(ids.to_ours([4, 2, 3, 0]), [1, 4, 5, 2])
  reordered = decoder.Decoder(ours_config).apply(
      {'params': ours}, jnp.asarray([[1, 4, 5, 2]]), deterministic=True)
  np.testing.assert_allclose(reordered[..., ids.to_ours(np.arange(7))],
                             logits, atol=1e-5)
  assert (reordered[..., 0] == masks.MASKED_LOGIT).all()
  back_config, back = vocabulary_rows.decoder_in_published_ids(
      ours_config, ours, ids, 'GPT-2')
  assert back_config == config
  jax.tree.map(np.testing.assert_array_equal, back, params)
  with raises_naming(ValueError, '8 ids', 'task.tokenizer.ids'):
    vocabulary_rows.decoder_in_published_ids(
        ours_config, ours, published_ids.IdOrder.of(8, eos=4), 'GPT-2')
  with raises_naming(ValueError, 'mask_padding', 'task.tokenizer.ids'):
    gpt2.to_hf(ours, ours_config)


def test_bert_export_of_a_converted_workdir_returns_to_bert_ids():
  ids = published_tokenizers.BertTokenizer.id_order(
      ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'a', 'b'])
  np.testing.assert_array_equal(ids.order, [0, 2, 1, 3, 5, 6, 4])
  config = encoder.config_for('tiny', vocab_size=7, max_length=8)
  params = nn.unbox(encoder.Bert(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32), deterministic=True,
      method='mlm_logits')['params'])
  params = {**params, 'mlm_bias': np.arange(7.0)}  # init is all zeros
  ours = vocabulary_rows.in_our_ids(params, ids)
  np.testing.assert_array_equal(ours['mlm_bias'], ids.order)
  _, exported = bert.to_hf(ours, config, ids)
  _, direct = bert.to_hf(params, config)
  for name, value in direct.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
