"""A converted MarianMT (OPUS-MT) workdir translates (greedy) with the
translate command as the reference does. Skipped without `transformers`
and `torch` (`pip install -e ".[interop]"`)."""

import os
import subprocess
import sys

import pytest

from conftest import MARIAN_SENTENCES as SENTENCES
from conftest import publish_marian
from conftest import published_and_converted

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')


published, converted = published_and_converted(publish_marian)


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
