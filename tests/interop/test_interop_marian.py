"""MarianMT (OPUS-MT): a randomly initialised transformers model with
SentencePiece vocabularies, saved as published, converted by the command,
tokenizes and scores as the reference does (the translate command:
e2e/test_interop_marian_e2e.py), and exports back to the published tensors
and tokenizer files (`convert --to=hf`). Skipped
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


def _logits_at_real_targets(model, trainer, params, directory):
  """(ours, `model`'s in our order) at the real target positions of
  teacher-forced padded batches; `model` reads Marian's ids."""
  _, _, pieces = marian.load(directory)
  order = marian.vocabulary_order(
      model.config.to_dict(), {p: i for i, p in enumerate(
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
  marian_pad = model.config.pad_token_id
  to_marian = lambda ids: torch.tensor(np.where(ids > 0, order[ids],
                                                marian_pad))
  decoder_inputs = np.pad(outputs, ((0, 0), (1, 0)))[:, :-1]
  with torch.no_grad():
    theirs = model(
        input_ids=to_marian(inputs),
        attention_mask=torch.tensor(inputs > 0),
        decoder_input_ids=to_marian(decoder_inputs)).logits.numpy()
  theirs = theirs[..., order]  # Marian's vocabulary in our order
  real = outputs > 0
  return ours[real], theirs[real]


def test_logits_match_the_reference_with_padding(published, converted):
  reference, directory = published
  trainer, params, _ = converted
  ours, expected = _logits_at_real_targets(reference, trainer, params,
                                           directory)
  error = np.abs(ours - expected).max() / np.abs(expected).max()
  assert error < 1e-5


def test_export_gives_back_the_published_model_and_tokenizer(published,
                                                             converted,
                                                             tmp_path):
  """The converted workdir exported (`export.export`, as `convert
  --to=hf`): the published tensors, special ids and vocab.json, which
  transformers loads with nothing missing, computing our logits, and a
  tokenizer that gives the published ids."""
  from transformer.interop import export  # pylint: disable=g-import-not-at-top
  from transformer.interop import files  # pylint: disable=g-import-not-at-top
  reference, directory = published
  trainer, params, workdir = converted
  out = tmp_path / 'out'
  written = export.export(workdir, str(out))
  assert written.startswith('Marian (MarianMTModel)')
  original = files.read_safetensors(directory)
  exported = files.read_safetensors(str(out))
  assert sorted(exported) == sorted(original)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
      out, output_loading_info=True)
  assert not any(info.values()), info
  for field in ('vocab_size', 'pad_token_id', 'eos_token_id',
                'decoder_start_token_id', 'activation_function',
                'scale_embedding', 'max_position_embeddings'):
    assert getattr(model.config, field) == getattr(reference.config, field)
  ours, theirs = _logits_at_real_targets(model.eval(), trainer, params,
                                         directory)
  assert np.abs(ours - theirs).max() < 1e-4
  assert json.loads((out / 'vocab.json').read_text()) == json.load(
      open(os.path.join(directory, 'vocab.json')))
  published_tokenizer = transformers.MarianTokenizer(
      source_spm=os.path.join(directory, 'source.spm'),
      target_spm=os.path.join(directory, 'target.spm'),
      vocab=os.path.join(directory, 'vocab.json'))
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  assert (tokenizer.source_lang, tokenizer.target_lang) == ('en', 'es')
  for sentence in SENTENCES:
    assert tokenizer(sentence)['input_ids'] == published_tokenizer(
        sentence)['input_ids']
