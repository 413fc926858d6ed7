"""A byte-level BPE vocabulary (Llama 3's kind) maps its ids as
transformers' tokenizer does. The converted Llama workdirs (converted by
the command): e2e/test_interop_llama_workdir_e2e.py. Skipped without
`transformers`, `torch` and `tokenizers` (`pip install -e ".[interop]"`).
"""

import json

import numpy as np
import pytest

from conftest import LLAMA_TEXTS as TEXTS
from transformer.data import published_tokenizers
from transformer.data import text

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')


def test_byte_level_vocabulary_as_llama3_publishes_it(tmp_path):
  """A byte-level BPE tokenizer.json without an unknown token, its BOS and
  EOS added special tokens after the BPE ids, config.json's EOS a list
  (Llama 3.1 Instruct's): EOS 1, Llama's id 0 our 2, BOS the start
  symbol; ids, bytes and text as transformers' tokenizer has them."""
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(text.offline_splits(200, 10, seed=0)['train'],
                          vocab_size=400, min_frequency=2,
                          show_progress=False)
  size = bpe.get_vocab_size()
  bpe.add_special_tokens(['<|begin_of_text|>', '<|end_of_text|>',
                          '<|eot_id|>'])
  bos, eot = size, size + 2
  bpe._tokenizer.post_processor = tokenizers_lib.processors.TemplateProcessing(  # pylint: disable=protected-access
      single='<|begin_of_text|> $A', special_tokens=[
          ('<|begin_of_text|>', bos)])
  bpe.save(str(tmp_path / 'tokenizer.json'))
  (tmp_path / 'tokenizer_config.json').write_text(json.dumps(
      {'tokenizer_class': 'PreTrainedTokenizerFast',
       'bos_token': '<|begin_of_text|>', 'eos_token': '<|eot_id|>'}))
  published = published_tokenizers.published_llama(str(tmp_path))
  bos_id, eos_id = published_tokenizers.llama_special_ids(
      {'eos_token_id': [size + 1, eot]}, str(tmp_path), published)
  assert (bos_id, eos_id) == (bos, eot)
  ids = published_tokenizers.LlamaTokenizer.id_order(published, eos_id)
  published_tokenizers.LlamaTokenizer.save(str(tmp_path / 'vocab'), published,
                                           ids, bos_id, eos_id)
  ours = published_tokenizers.LlamaTokenizer(str(tmp_path / 'vocab'))
  reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
  assert ours.vocab_size == size + 4
  assert (ours.ids.to_published([1, 2, ours.start_id]) == [eot, 0, bos]).all()
  for sample in TEXTS + [' leading space']:
    ids = ours.encode(sample, add_eos=False)
    expected = reference(sample)['input_ids']
    assert expected[0] == bos
    np.testing.assert_array_equal(
        ours.ids.to_published(ids).reshape(-1), expected[1:])
    assert b''.join(map(ours.token_bytes, ids)) == sample.encode()
    assert ours.decode(ids + [1, 5]) == sample
  assert ours.token_bytes(ours.start_id) == b''
