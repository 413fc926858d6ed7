"""Language-modelling data: documents, byte and character tokenizers and
next-token examples (TFDS text: e2e/test_text_data_e2e.py)."""

import json
import os

import numpy as np
import pytest

from conftest import raises_naming
from conftest import REPO
from transformer.data import batching
from transformer.data import packing
from transformer.data import text
from transformer.data import tokenization

SHAKESPEARE = os.path.join(REPO, '..', 'shared', 'data', 'tinyshakespeare',
                           'input.txt')
EOS = tokenization.EOS_ID

# ---------------------------------------------------------------------------
# Offline documents


def sentences_of(document):
  return document[:-1].split('. ')


def test_offline_documents_are_deterministic_paragraphs():
  documents = text.offline_documents(300, seed=1, max_sentences=3)
  assert documents == text.offline_documents(300, seed=1, max_sentences=3)
  assert documents != text.offline_documents(300, seed=2, max_sentences=3)
  counts = set()
  for document in documents:
    assert document.endswith('.') and '  ' not in document
    counts.add(len(sentences_of(document)))
    for sentence in sentences_of(document):
      assert sentence[0].isupper() and sentence[1:].islower()
  assert counts == {1, 2, 3}
  single = text.offline_documents(20, seed=1, max_sentences=1)
  assert all(len(sentences_of(d)) == 1 for d in single)


def test_offline_splits_hold_out_documents():
  data = text.offline_splits(num_train=300, num_eval=50, seed=0)
  assert {k: len(v) for k, v in data.items()} == {'train': 300,
                                                  'validation': 50}
  assert len(set(data['train'] + data['validation'])) == 350
  assert text.offline_splits(300, 50, seed=0) == data
  # Runs that differ only in training size are evaluated on the same text.
  assert text.offline_splits(5, 50, seed=0)['validation'] == data[
      'validation']


def test_offline_splits_skip_repeated_documents(monkeypatch):
  # A grammar of 16 sentences, 64 more with 'with': one-sentence documents
  # collide often.
  monkeypatch.setattr(text.offline_mt, 'NOUNS', text.offline_mt.NOUNS[:2])
  monkeypatch.setattr(text.offline_mt, 'MAX_ADJECTIVES', 0)
  monkeypatch.setattr(text.offline_mt, 'VERBS', text.offline_mt.VERBS[:1])
  monkeypatch.setattr(text.offline_mt, 'DETERMINERS',
                      text.offline_mt.DETERMINERS[:1])
  monkeypatch.setattr(text.offline_mt, 'PREPOSITIONS', {'with': 'con'})
  assert len(set(text.offline_documents(40, seed=0, max_sentences=1))) < 40
  # 70 of the 80 documents: repeats would be certain without the check.
  data = text.offline_splits(50, 20, seed=0, max_sentences=1)
  assert len(set(data['train'] + data['validation'])) == 70


# ---------------------------------------------------------------------------
# Local text


@pytest.fixture(name='folder')
def fixture_folder(tmp_path):
  (tmp_path / 'b.txt').write_bytes('Zwei\r\n\n  drei  \n'.encode('utf-8'))
  (tmp_path / 'a.txt').write_text('héllo\nwörld ✓', encoding='utf-8')
  (tmp_path / 'empty.txt').write_text('', encoding='utf-8')
  (tmp_path / 'notes.md').write_text('not text', encoding='utf-8')
  (tmp_path / 'dir.txt').mkdir()
  return tmp_path


@pytest.fixture(name='logged')
def fixture_logged(monkeypatch):
  messages = []
  monkeypatch.setattr(text.logging, 'info',
                      lambda msg, *args: messages.append(msg % args))
  return messages


def test_read_documents_per_file(folder, logged):
  # Sorted *.txt files, each unchanged ('\r\n' kept); the empty one dropped.
  assert text.read_documents(str(folder)) == [
      'héllo\nwörld ✓', 'Zwei\r\n\n  drei  \n']
  assert len(logged) == 1 and 'Dropped 1 empty of 3 files' in logged[0]
  assert text.read_documents(str(folder / 'a.txt'), per='file') == [
      'héllo\nwörld ✓']


def test_read_documents_per_line(folder, logged):
  assert text.read_documents(str(folder), per='line') == [
      'héllo', 'wörld ✓', 'Zwei', 'drei']
  assert len(logged) == 1 and 'Dropped 1 empty of 5 lines' in logged[0]
  logged.clear()
  assert text.read_documents(str(folder / 'a.txt'), per='line') == [
      'héllo', 'wörld ✓']
  assert not logged


def test_read_documents_errors_say_how_to_fix(folder):
  with raises_naming(FileNotFoundError, str(folder / 'nope'),
                     'does not exist', 'folder of .txt files'):
    text.read_documents(str(folder / 'nope'))
  (folder / 'md').mkdir()
  (folder / 'md' / 'x.md').write_text('x', encoding='utf-8')
  with raises_naming(FileNotFoundError, 'No .txt files', "['x.md']",
                     '*.txt'):
    text.read_documents(str(folder / 'md'))
  with raises_naming(ValueError, 'per', "'file'", "'line'", "got 'word'"):
    text.read_documents(str(folder), per='word')


def test_split_text_is_a_prefix_and_the_rest():
  assert text.split_text('abcdefghij', 0.9) == ('abcdefghi', 'j')
  assert text.split_text('abcdefghij', 0.25) == ('ab', 'cdefghij')
  assert text.split_text('abc', 1.0) == ('abc', '')
  with raises_naming(ValueError, 'train_fraction', '[0, 1]', '1.5'):
    text.split_text('abc', 1.5)


def test_count_bytes_and_characters():
  documents = ['héllo', 'wörld ✓', '']
  assert text.count_characters(documents) == 5 + 7
  assert text.count_bytes(documents) == 6 + 10


# ---------------------------------------------------------------------------
# Next-token examples


def random_documents(seed, num=30, max_len=40):
  rng = np.random.default_rng(seed)
  return [rng.integers(3, 50, rng.integers(0, max_len)).tolist()
          for _ in range(num)] + [[], [7]]


@pytest.mark.parametrize('max_length', [1, 2, 7, 64])
def test_lm_examples_predict_every_token_once(max_length):
  documents = random_documents(max_length)
  examples = text.lm_examples(documents, max_length)
  assert sum(-(-(len(d) + 1) // max_length) for d in documents) == len(
      examples)
  chunks = iter(examples)
  for ids in documents:
    inputs, targets = [], []
    while len(inputs) < len(ids) + 1:
      chunk_inputs, chunk_targets = next(chunks)
      assert chunk_inputs.dtype == chunk_targets.dtype == np.int32
      assert 1 <= len(chunk_inputs) == len(chunk_targets) <= max_length
      # Within a chunk, targets are the inputs shifted by one.
      np.testing.assert_array_equal(chunk_inputs[1:], chunk_targets[:-1])
      inputs += chunk_inputs.tolist()
      targets += chunk_targets.tolist()
    # No chunk runs into the next document; only the last one is short.
    assert len(inputs) == len(ids) + 1
    assert inputs == [EOS] + ids and targets == ids + [EOS]
  assert next(chunks, None) is None


def test_lm_examples_chunks_are_maximal_and_consecutive():
  (a_in, a_out), (b_in, b_out), (c_in, c_out) = text.lm_examples(
      [[5, 6, 7, 8, 9]], max_length=2)
  assert [a_in.tolist(), b_in.tolist(), c_in.tolist()] == [
      [EOS, 5], [6, 7], [8, 9]]
  assert [a_out.tolist(), b_out.tolist(), c_out.tolist()] == [
      [5, 6], [7, 8], [9, EOS]]


def test_shifted_chunks_cut_long_documents_elsewhere_each_epoch():
  max_length = 8
  documents = random_documents(3, num=40, max_len=60)
  source, target = batching.sides(text.lm_examples(documents, max_length),
                                  max_length)
  # Document starts: where each document's inputs begin in the stream.
  sizes = np.array([len(d) + 1 for d in documents])
  document_starts = set((np.cumsum(sizes) - sizes).tolist())
  bounds = {}
  for epoch in range(3):
    new_source, new_target = text.ShiftedLMChunks(
        source, max_length, seed=0)(epoch, source, target)
    # The same tokens, in the same order, every token still predicted once.
    assert new_source.tokens is source.tokens
    assert new_target.tokens is target.tokens
    np.testing.assert_array_equal(new_source.lengths, new_target.lengths)
    assert new_source.lengths.sum() == source.lengths.sum()
    assert 1 <= new_source.lengths.min() and (
        new_source.lengths.max() <= max_length)
    starts = set(new_source.starts.tolist())
    assert document_starts <= starts  # no chunk runs into the next document
    # Documents that fit in one chunk stay whole.
    for start, size in zip(np.cumsum(sizes) - sizes, sizes):
      if size <= max_length:
        assert not set(range(start + 1, start + size)) & starts
    bounds[epoch] = starts
  assert bounds[0] != bounds[1] != bounds[2]
  again, _ = text.ShiftedLMChunks(source, max_length, seed=0)(1, source,
                                                              target)
  assert set(again.starts.tolist()) == bounds[1]  # a function of the epoch
  other, _ = text.ShiftedLMChunks(source, max_length, seed=1)(1, source,
                                                              target)
  assert set(other.starts.tolist()) != bounds[1]


def test_shifted_chunks_refuse_chunks_that_do_not_start_a_document():
  source, target = batching.sides(text.lm_examples([[5] * 20], 8), 8)
  rest = [batching.Side.from_arrays(side.tokens[8:], side.lengths[1:])
          for side in (source, target)]
  with raises_naming(ValueError, 'EOS', 'lm_examples'):
    text.ShiftedLMChunks(rest[0], 8, seed=0)


def test_lm_examples_reject_documents_with_eos_or_padding():
  assert not text.lm_examples([], max_length=8)
  with raises_naming(ValueError, 'Document 2', 'id 1', 'add_eos=False'):
    text.lm_examples([[4], [], [5, 6, 1]], max_length=8)
  with raises_naming(ValueError, 'Document 1', 'id 0', 'add_eos=False'):
    text.lm_examples([[4], [0]], max_length=8)
  with raises_naming(ValueError, 'max_length', '>= 1', 'got 0'):
    text.lm_examples([[4]], max_length=0)


def test_packed_lm_examples_keep_documents_in_separate_segments():
  max_length = 16
  examples = text.lm_examples(random_documents(0, max_len=30), max_length)
  batch = packing.pack(examples, max_length)
  np.testing.assert_array_equal(batch['inputs_segmentation'],
                                batch['targets_segmentation'])
  np.testing.assert_array_equal(batch['inputs_position'],
                                batch['targets_position'])
  unpacked = []
  for r in range(len(batch['inputs'])):
    segments = batch['inputs_segmentation'][r]
    for segment in range(1, segments.max() + 1):
      where = segments == segment
      np.testing.assert_array_equal(batch['inputs_position'][r][where],
                                    np.arange(where.sum()))
      unpacked.append((batch['inputs'][r][where].tolist(),
                       batch['targets'][r][where].tolist()))
  assert unpacked == [(i.tolist(), t.tolist()) for i, t in examples]


# ---------------------------------------------------------------------------
# Byte tokenizer


def test_byte_tokenizer_round_trip_on_non_ascii():
  tokenizer = tokenization.ByteTokenizer()
  assert tokenizer.vocab_size == 259
  sample = 'héllo wörld ✓'
  ids = tokenizer.encode(sample)
  assert len(ids) == len(sample.encode('utf-8')) + 1 == 18
  assert ids[-1] == EOS and min(ids[:-1]) >= 3 and max(ids) < 259
  assert ids[:2] == [ord('h') + 3, 0xc3 + 3]
  assert tokenizer.encode(sample, add_eos=False) == ids[:-1]
  assert tokenizer.decode(ids) == sample
  assert tokenizer.encode_batch([sample, 'a'], add_eos=False) == [
      ids[:-1], [ord('a') + 3]]


def test_byte_tokenizer_decode_stops_at_eos_skips_padding_and_never_raises():
  tokenizer = tokenization.ByteTokenizer()
  first, second = tokenizer.encode('ünï'), tokenizer.encode('b')
  padded = np.zeros((2, 10), np.int32)
  padded[0, :len(first)] = first
  padded[1, :len(second) + 2] = second + second
  assert tokenizer.decode_batch(padded) == ['ünï', 'b']
  assert tokenizer.decode([0] + first[:-1] + [0]) == 'ünï'
  # A lone continuation byte, a lead byte cut short, the unknown id.
  assert tokenizer.decode([0x80 + 3, 0xe2 + 3, ord('a') + 3, 2]) == (
      '\ufffd\ufffda\ufffd')
  with raises_naming(ValueError, 'Id 259', '[0, 259)'):
    tokenizer.decode([259])


def test_byte_tokenizer_pieces_are_readable():
  tokenizer = tokenization.ByteTokenizer()
  assert [tokenizer.id_to_piece(i) for i in (0, 1, 2)] == [
      '<pad>', '</s>', '<unk>']
  pieces = [tokenizer.id_to_piece(i) for i in tokenizer.encode('a\n é')[:-1]]
  assert pieces == ['a', '\\n', ' ', '\\xc3', '\\xa9']


# ---------------------------------------------------------------------------
# Character tokenizer

CHAR_TEXTS = ['hello wörld', 'Low\nhell!']


def test_char_tokenizer_round_trip_and_unknown_characters():
  tokenizer = tokenization.CharTokenizer.build(iter(CHAR_TEXTS))
  assert tokenizer.characters == '\n !Ldehlorwö'
  assert tokenizer.vocab_size == 3 + 12
  for sample in CHAR_TEXTS:
    ids = tokenizer.encode(sample)
    assert len(ids) == len(sample) + 1 and ids[-1] == EOS
    assert 3 <= min(ids[:-1]) and max(ids) < tokenizer.vocab_size
    assert tokenizer.decode(ids + [0, 5]) == sample
  assert tokenizer.encode('\n') == [3, EOS]
  assert tokenizer.encode('hz✓', add_eos=False) == [tokenizer.encode('h')[0],
                                                      2, 2]
  assert tokenizer.decode(tokenizer.encode('hz')) == 'h\ufffd'
  assert tokenizer.encode_batch(CHAR_TEXTS, add_eos=False) == [
      tokenizer.encode(t, add_eos=False) for t in CHAR_TEXTS]
  assert tokenizer.decode_batch(np.array([[9, 1, 4], [0, 8, 0]])) == [
      'h', 'e']
  assert [tokenizer.id_to_piece(i) for i in (1, 3, 4, 14)] == [
      '</s>', '\\n', ' ', 'ö']
  with raises_naming(ValueError, 'Id -1', 'outside the vocabulary'):
    tokenizer.decode([-1])
  with raises_naming(ValueError, 'training texts', 'empty'):
    tokenization.CharTokenizer.build(['', ''])


def test_char_tokenizer_save_and_load(tmp_path):
  built = tokenization.CharTokenizer.build(CHAR_TEXTS)
  path = str(tmp_path / 'vocab' / 'chars.json')
  built.save(path)
  # Written by a rename: nothing else is left in the folder.
  assert os.listdir(tmp_path / 'vocab') == ['chars.json']
  loaded = tokenization.CharTokenizer(path)
  assert loaded.characters == built.characters
  assert loaded.vocab_size == built.vocab_size
  assert loaded.encode(CHAR_TEXTS[0]) == built.encode(CHAR_TEXTS[0])
  with open(path, 'w', encoding='utf-8') as f:
    json.dump({'characters': 'ba'}, f)
  with raises_naming(ValueError, path, 'Delete it'):
    tokenization.CharTokenizer(path)


def test_load_or_build_builds_once_then_reuses(tmp_path, monkeypatch):
  path = str(tmp_path / 'vocab' / 'chars.json')
  calls = []

  def texts():
    calls.append(1)
    return iter(CHAR_TEXTS)

  first = tokenization.CharTokenizer.load_or_build(path, texts)
  assert calls == [1] and first.vocab_size == 15
  mtime = os.path.getmtime(path)

  def no_build(texts):
    raise AssertionError('rebuilt although the characters are saved')

  monkeypatch.setattr(tokenization.CharTokenizer, 'build', no_build)
  second = tokenization.CharTokenizer.load_or_build(path, texts)
  assert calls == [1] and os.path.getmtime(path) == mtime
  assert second.characters == first.characters


# ---------------------------------------------------------------------------
# Tiny Shakespeare (optional)


def test_tiny_shakespeare():
  if not os.path.isfile(SHAKESPEARE):
    pytest.skip(f'{SHAKESPEARE} is absent')
  documents = text.read_documents(SHAKESPEARE)
  assert len(documents) == 1
  assert text.count_characters(documents) == 1_115_394
  assert text.count_bytes(documents) == 1_115_394  # ASCII only
  tokenizer = tokenization.CharTokenizer.build(documents)
  assert len(tokenizer.characters) == 65 and tokenizer.vocab_size == 68
  train, validation = text.split_text(documents[0], 0.9)
  # nanoGPT's data/shakespeare_char/prepare.py: 1,003,854 and 111,540.
  assert (len(train), len(validation)) == (1_003_854, 111_540)
  ids = tokenizer.encode(validation, add_eos=False)
  assert tokenizer.decode(ids) == validation
  examples = text.lm_examples([ids], max_length=256)
  assert len(examples) == -(-(len(validation) + 1) // 256)
