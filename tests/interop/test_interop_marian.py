"""MarianMT (OPUS-MT): a randomly initialised transformers model with
SentencePiece vocabularies, saved as published, converted by the command,
tokenizes and scores as the reference does (the translate command:
e2e/test_interop_marian_e2e.py). Skipped
without `transformers` and `torch` (`pip install -e ".[interop]"`)."""

import json
import os

import numpy as np
import pytest

from conftest import MARIAN_SENTENCES as SENTENCES
from conftest import publish_marian
from conftest import published_and_converted
from transformer.interop import marian

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')


published, converted = published_and_converted(publish_marian)


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
  order = marian.vocabulary_order(
      reference.config.to_dict(), {p: i for i, p in enumerate(
          json.load(open(os.path.join(directory, 'vocab.json'))))}).order
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
