"""MarianMT (OPUS-MT): a randomly initialised transformers model with
SentencePiece vocabularies, saved as published, converted by the command,
tokenizes, scores and translates (greedy) as the reference does. Skipped
without `transformers` and `torch` (`pip install -e ".[interop]"`)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

from conftest import convert_and_restore
from conftest import randomised
from transformer.data.generated import offline_mt
from transformer.interop import marian

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

SENTENCES = ['the red house is big', 'a small cat sees the dog',
             'the dogs walk to the green park', 'zebra quilts?']


def _train_spm(path, sentences, vocab_size):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_prefix=str(path),
      vocab_size=vocab_size, model_type='unigram', hard_vocab_limit=False,
      character_coverage=1.0, minloglevel=2)
  os.rename(f'{path}.model', path)


@pytest.fixture(scope='module')
def published(tmp_path_factory):
  """An OPUS-MT-shaped directory: weights, config, spm models, vocab.json
  (EOS 0, unknown 1, padding last, as Marian numbers them)."""
  directory = tmp_path_factory.mktemp('opus_mt')
  pairs = offline_mt.splits(300, 10, 10, seed=0)['train']
  _train_spm(directory / 'source.spm', [s for s, _ in pairs], 120)
  _train_spm(directory / 'target.spm', [t for _, t in pairs], 120)
  pieces = []
  for name in ('source.spm', 'target.spm'):
    model = spm.SentencePieceProcessor(model_file=str(directory / name))
    pieces += [model.id_to_piece(i) for i in range(model.vocab_size())
               if not model.is_control(i) and not model.is_unknown(i)]
  pieces = ['</s>', '<unk>'] + sorted(set(pieces)) + ['<pad>']
  with open(directory / 'vocab.json', 'w') as f:
    json.dump({p: i for i, p in enumerate(pieces)}, f)
  with open(directory / 'tokenizer_config.json', 'w') as f:
    json.dump({'source_lang': 'en', 'target_lang': 'es'}, f)
  size = len(pieces)
  config = transformers.MarianConfig(
      vocab_size=size, decoder_vocab_size=size, d_model=32, encoder_layers=2,
      decoder_layers=2, encoder_attention_heads=4,
      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
      max_position_embeddings=64, activation_function='swish',
      scale_embedding=True, pad_token_id=size - 1, eos_token_id=0,
      decoder_start_token_id=size - 1, forced_eos_token_id=None)
  torch.manual_seed(0)
  model = randomised(transformers.MarianMTModel(config))
  model.save_pretrained(directory)
  return model, str(directory)


@pytest.fixture(scope='module')
def converted(published, tmp_path_factory):
  return convert_and_restore(
      published[-1], str(tmp_path_factory.mktemp('converted') / 'workdir'))


def test_tokenization_matches_the_reference(published, converted):
  _, directory = published
  trainer, _, _ = converted
  reference = transformers.MarianTokenizer(
      source_spm=os.path.join(directory, 'source.spm'),
      target_spm=os.path.join(directory, 'target.spm'),
      vocab=os.path.join(directory, 'vocab.json'))
  _, _, pieces = marian.load(directory)
  ours = trainer.task.tokenizer
  for sentence in SENTENCES:
    expected = reference(sentence)['input_ids']
    # Same pieces, our ids: padding 0, EOS 1, unknown 2, then Marian's.
    assert [pieces[i] for i in ours.encode(sentence)] == \
        reference.convert_ids_to_tokens(expected)
  assert ours.encode('zebra quilts?')[-1] == 1
  assert 2 in ours.encode('zebra quilts?')  # 'z' is not in the vocabulary


def test_logits_match_the_reference_with_padding(published, converted):
  reference, directory = published
  trainer, params, _ = converted
  _, _, pieces = marian.load(directory)
  order = np.asarray(marian.vocabulary_order(
      reference.config.to_dict(), {p: i for i, p in enumerate(
          json.load(open(os.path.join(directory, 'vocab.json'))))}))
  assert [pieces[i] for i in range(3)] == ['<pad>', '</s>', '<unk>']
  tokenizer = trainer.task.tokenizer
  sources = [tokenizer.encode(s) for s in SENTENCES[:3]]
  targets = [tokenizer.encode(s) for s in ('el perro', 'la casa roja es',
                                           'un gato')]
  width = max(len(r) for r in sources + targets)
  pad = lambda rows: np.asarray([r + [0] * (width - len(r)) for r in rows])
  inputs, outputs = pad(sources), pad(targets)
  ours = np.asarray(trainer.task.model.apply(
      {'params': params}, inputs, outputs, deterministic=True))
  marian_pad = reference.config.pad_token_id
  to_marian = lambda ids: torch.tensor(np.where(ids > 0, order[ids],
                                                marian_pad))
  decoder_inputs = np.pad(outputs, ((0, 0), (1, 0)))[:, :-1]
  with torch.no_grad():
    expected = reference(
        input_ids=to_marian(inputs),
        attention_mask=torch.tensor(inputs > 0),
        decoder_input_ids=to_marian(decoder_inputs)).logits.numpy()
  expected = expected[..., order]  # Marian's vocabulary in our order
  real = outputs > 0
  error = np.abs(ours[real] - expected[real]).max() / np.abs(
      expected[real]).max()
  assert error < 1e-5


def _reference_greedy(model, ids, cap):
  """Marian's greedy search as Hugging Face runs it for OPUS-MT models:
  padding never generated, EOS forced at the length cap."""
  config = model.config
  tokens = [config.decoder_start_token_id]
  with torch.no_grad():
    for step in range(cap):
      logits = model(input_ids=torch.tensor([ids]),
                     decoder_input_ids=torch.tensor([tokens])).logits[0, -1]
      logits[config.pad_token_id] = -float('inf')
      token = config.eos_token_id if step == cap - 1 else int(logits.argmax())
      tokens.append(token)
      if token == config.eos_token_id:
        break
  return tokens[1:]


def test_translate_command_matches_reference_greedy_search(published,
                                                           converted):
  reference, directory = published
  _, _, workdir = converted
  offset = 6
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       f'--workdir={workdir}',
       '--beam_size=1', f'--max_length_offset={offset}'],
      input='\n'.join(SENTENCES) + '\n', capture_output=True, text=True,
      check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  hf_tokenizer = transformers.MarianTokenizer(
      source_spm=os.path.join(directory, 'source.spm'),
      target_spm=os.path.join(directory, 'target.spm'),
      vocab=os.path.join(directory, 'vocab.json'))
  expected = []
  for sentence in SENTENCES:
    ids = hf_tokenizer(sentence)['input_ids']
    tokens = _reference_greedy(reference, ids, len(ids) + offset)
    expected.append(hf_tokenizer.decode(tokens, skip_special_tokens=True,
                                        use_source_tokenizer=False))
  assert result.stdout.splitlines() == expected
