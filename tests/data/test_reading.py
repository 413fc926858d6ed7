"""The reading layer for user files (`reading`, and the readers built on it:
TSV, tokenizer files, safetensors): fed random truncations, byte flips and
encodings, each reader returns what the bytes hold or raises one line
naming the file (and the line where it can), never another exception."""

import gzip
import json
import os

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from conftest import raises_naming
from transformer.data import glue
from transformer.data import published_tokenizers
from transformer.data import reading

tokenizers_lib = pytest.importorskip('tokenizers')
safetensors_numpy = pytest.importorskip('safetensors.numpy')

PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ENCODINGS = ('utf-8', 'utf-8-sig', 'utf-16', 'latin-1', 'cp1252')
# Text with the characters a user file holds: multi-byte ones, tabs, '\r'.
TEXT = st.text(st.characters(codec='utf-8', exclude_categories=('Cs',)),
               max_size=60) | st.sampled_from(
                   ['café\tcrème\n', 'a\r\nb\n', '✓ naïve\n\n', '\ufeffx'])


@st.composite
def damaged(draw, raw: bytes) -> bytes:
  """`raw` cut short, with some bytes flipped, or as it is."""
  if raw and draw(st.booleans()):
    raw = raw[:draw(st.integers(0, len(raw) - 1))]
  flips = draw(st.lists(st.tuples(st.integers(0, 1 << 30),
                                  st.integers(1, 255)), max_size=3))
  data = bytearray(raw)
  for where, mask in flips:
    if data:
      data[where % len(data)] ^= mask
  return bytes(data)


def assert_named(error: BaseException, path: str) -> str:
  """The message of `error`: one line naming `path`."""
  message = str(error)
  assert path in message and '\n' not in message, message
  return message


def named_line(message: str) -> int:
  """The line number a message names ('... at line 3 ...')."""
  words = message.replace(',', ' ').split()
  return int(words[words.index('line') + 1])


# -- text ---------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), content=TEXT, encoding=st.sampled_from(ENCODINGS),
       gzipped=st.booleans())
def test_text_is_read_or_refused_naming_the_line(tmp_path, data, content,
                                                 encoding, gzipped):
  raw = data.draw(damaged(content.encode(encoding, errors='replace')))
  path = str(tmp_path / ('file.txt.gz' if gzipped else 'file.txt'))
  stored = data.draw(damaged(gzip.compress(raw))) if gzipped else raw
  with open(path, 'wb') as f:
    f.write(stored)
  try:
    got = reading.text(path)
  except reading.Unreadable as e:
    message = assert_named(e, path)
    if 'not valid UTF-8: byte' in message:
      # The line named is the first that is not UTF-8.
      rows = (gzip.decompress(stored) if gzipped else raw).split(b'\n')
      line = named_line(message)
      b'\n'.join(rows[:line - 1]).decode('utf-8-sig')
      with pytest.raises(UnicodeDecodeError):
        b'\n'.join(rows[:line]).decode('utf-8-sig')
    return
  stored_text = gzip.decompress(stored) if gzipped else stored
  assert got == stored_text.decode('utf-8-sig')
  assert reading.lines(path) == reading.split_lines(got)


def test_a_byte_order_mark_is_no_part_of_the_text(tmp_path):
  (tmp_path / 'a.txt').write_bytes(b'\xef\xbb\xbfid\tlabel\nx\t1\n')
  assert reading.lines(str(tmp_path / 'a.txt')) == ['id\tlabel', 'x\t1']
  assert reading.text(str(tmp_path / 'a.txt')).startswith('id')


def test_utf16_is_named_with_its_conversion(tmp_path):
  (tmp_path / 'a.tsv').write_bytes('sentence\tlabel\n'.encode('utf-16'))
  with raises_naming(reading.Unreadable, str(tmp_path / 'a.tsv'), 'UTF-16',
                     'iconv -f utf-16'):
    reading.lines(str(tmp_path / 'a.tsv'))


# -- JSON ---------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=5), inner, max_size=3), max_leaves=8)


@PROPERTY
@given(data=st.data(), value=st.dictionaries(st.text(max_size=6),
                                             JSON_VALUES, max_size=4),
       encoding=st.sampled_from(('utf-8', 'utf-8-sig')),
       ascii_only=st.booleans(), indent=st.sampled_from((None, 2)))
def test_json_is_read_or_refused_naming_the_line(tmp_path, data, value,
                                                 encoding, ascii_only,
                                                 indent):
  raw = data.draw(damaged(json.dumps(value, ensure_ascii=ascii_only,
                                     indent=indent).encode(encoding)))
  path = str(tmp_path / 'config.json')
  with open(path, 'wb') as f:
    f.write(raw)
  try:
    got = reading.json_object(path)
  except reading.Unreadable as e:
    message = assert_named(e, path)
    assert 'download it again' in message
    if 'not valid JSON' in message and 'deeply' not in message:
      assert 'line' in message and 'column' in message
    return
  assert got == json.loads(raw.decode('utf-8-sig'))


def test_json_that_is_no_object_is_named(tmp_path):
  (tmp_path / 'config.json').write_text('[1, 2]')
  with raises_naming(reading.Unreadable, str(tmp_path / 'config.json'),
                     'a list', 'JSON object'):
    reading.json_object(str(tmp_path / 'config.json'))


# -- safetensors --------------------------------------------------------------


@pytest.fixture(scope='module')
def checkpoint_bytes(tmp_path_factory):
  path = tmp_path_factory.mktemp('safetensors') / 'model.safetensors'
  tensors = {'a': np.arange(6, dtype=np.float32).reshape(2, 3),
             'b': np.ones(4, np.float16)}
  safetensors_numpy.save_file(tensors, str(path))
  return path.read_bytes(), tensors


@PROPERTY
@given(data=st.data())
def test_safetensors_are_read_or_refused_naming_the_file(tmp_path, data,
                                                         checkpoint_bytes):
  raw, tensors = checkpoint_bytes
  damaged_raw = data.draw(damaged(raw))
  path = str(tmp_path / 'model.safetensors')
  with open(path, 'wb') as f:
    f.write(damaged_raw)
  try:
    got = reading.safetensors(path)
  except reading.Unreadable as e:
    assert 'download it again' in assert_named(e, path)
    return
  assert all(isinstance(v, np.ndarray) for v in got.values())
  if damaged_raw == raw:
    assert sorted(got) == sorted(tensors)
    for name, value in tensors.items():
      np.testing.assert_array_equal(got[name], value)


# -- tokenizer files ----------------------------------------------------------

DOCUMENTS = ['the red house is big', 'a small cat sees the dog',
             'naïve café ✓'] * 5


@pytest.fixture(scope='module')
def gpt2_files(tmp_path_factory):
  """A byte-level BPE's tokenizer.json, vocab.json and merges.txt: bytes."""
  folder = tmp_path_factory.mktemp('gpt2')
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(DOCUMENTS, vocab_size=280, show_progress=False)
  bpe.save(str(folder / 'tokenizer.json'))
  bpe.save_model(str(folder))
  return {name: (folder / name).read_bytes()
          for name in ('tokenizer.json', 'vocab.json', 'merges.txt')}


@pytest.fixture(scope='module')
def bert_files(tmp_path_factory):
  """A WordPiece vocab.txt and a tokenizer_config.json: bytes."""
  folder = tmp_path_factory.mktemp('bert')
  wordpiece = tokenizers_lib.BertWordPieceTokenizer(lowercase=True)
  wordpiece.train_from_iterator(DOCUMENTS, vocab_size=120,
                                show_progress=False)
  wordpiece.save_model(str(folder))
  return {'vocab.txt': (folder / 'vocab.txt').read_bytes(),
          'tokenizer_config.json': json.dumps(
              {'do_lower_case': True, 'strip_accents': None,
               'model_max_length': 512}, indent=2).encode()}


def _write(folder, files):
  for name in os.listdir(folder):
    os.remove(folder / name)
  for name, raw in files.items():
    (folder / name).write_bytes(raw)


@PROPERTY
@given(data=st.data(), layout=st.sampled_from(
    [('tokenizer.json',), ('vocab.json', 'merges.txt')]))
def test_gpt2_tokenizer_files_are_read_or_refused_naming_the_file(
    tmp_path, data, layout, gpt2_files):
  files = {name: gpt2_files[name] for name in layout}
  hurt = data.draw(st.sampled_from(layout))
  files[hurt] = data.draw(damaged(files[hurt]))
  _write(tmp_path, files)
  try:
    tokenizer = published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  except reading.Unreadable as e:
    assert_named(e, str(tmp_path / hurt))
    return
  assert tokenizer.decode(tokenizer.encode('the red house').ids) == (
      'the red house') or files != {n: gpt2_files[n] for n in layout}


@PROPERTY
@given(data=st.data(), hurt=st.sampled_from(['vocab.txt',
                                             'tokenizer_config.json']))
def test_bert_tokenizer_files_are_read_or_refused_naming_the_file(
    tmp_path, data, hurt, bert_files):
  files = dict(bert_files)
  files[hurt] = data.draw(damaged(files[hurt]))
  _write(tmp_path, files)
  try:
    published_tokenizers.published_bpe(str(tmp_path), 'bert')
  except reading.Unreadable as e:
    message = assert_named(e, str(tmp_path / hurt))
    if hurt == 'tokenizer_config.json':
      assert 'vocab.txt' not in message


def test_a_damaged_tokenizer_config_is_named_not_the_vocabulary(
    tmp_path, bert_files):
  """Reported: '.../vocab.txt do not make a tokenizer (Expecting value:
  line 1 column 19)' for a tokenizer_config.json cut short."""
  _write(tmp_path, {'vocab.txt': bert_files['vocab.txt'],
                    'tokenizer_config.json': b'{"do_lower_case": }'})
  with raises_naming(reading.Unreadable,
                     str(tmp_path / 'tokenizer_config.json'),
                     'line 1 column 19', 'download it again') as error:
    published_tokenizers.published_bpe(str(tmp_path), 'bert')
  assert 'vocab.txt' not in str(error.value)
  (tmp_path / 'tokenizer_config.json').write_text('{"do_lower_case": "no"}')
  with raises_naming(reading.Unreadable,
                     str(tmp_path / 'tokenizer_config.json'),
                     "do_lower_case='no'"):
    published_tokenizers.published_bpe(str(tmp_path), 'bert')


def test_gpt2_needs_byte_level_bpe(tmp_path):
  """Reported: a Unigram tokenizer.json beside GPT-2 weights ended in
  KeyError: '▁' once the workdir was being written. Unigram models, and
  BPE ones without byte-level pre-tokenization (Llama 2's), are refused by
  name; the same file is fine for Llama."""
  unigram = tokenizers_lib.SentencePieceUnigramTokenizer()
  unigram.train_from_iterator(DOCUMENTS, vocab_size=60, show_progress=False)
  unigram.save(str(tmp_path / 'tokenizer.json'))
  with raises_naming(reading.Unreadable, str(tmp_path / 'tokenizer.json'),
                     'Unigram', 'byte-level BPE'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  published_tokenizers.published_bpe(str(tmp_path), 'llama')
  bpe = tokenizers_lib.SentencePieceBPETokenizer()
  bpe.train_from_iterator(DOCUMENTS, vocab_size=60, show_progress=False)
  bpe.save(str(tmp_path / 'tokenizer.json'))
  with raises_naming(reading.Unreadable, str(tmp_path / 'tokenizer.json'),
                     'without byte-level', 'byte-level BPE'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')


def test_older_files_read_as_the_library_reads_them(tmp_path, gpt2_files,
                                                    bert_files):
  """vocab.json with merges.txt, and vocab.txt, read through `reading`,
  make the tokenizer the library makes of the files themselves (a
  byte-order mark aside)."""
  _write(tmp_path, {n: gpt2_files[n] for n in ('vocab.json', 'merges.txt')})
  ours = published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  library = tokenizers_lib.ByteLevelBPETokenizer(
      str(tmp_path / 'vocab.json'), str(tmp_path / 'merges.txt'))
  assert ours.get_vocab() == library.get_vocab()
  assert ours.encode(DOCUMENTS[2]).ids == library.encode(DOCUMENTS[2]).ids
  _write(tmp_path, {'vocab.txt': b'\xef\xbb\xbf' + bert_files['vocab.txt']})
  ours = published_tokenizers.published_bpe(str(tmp_path), 'bert')
  (tmp_path / 'vocab.txt').write_bytes(bert_files['vocab.txt'])
  library = tokenizers_lib.BertWordPieceTokenizer(str(tmp_path / 'vocab.txt'))
  assert ours.get_vocab() == library.get_vocab()


def test_a_merge_that_is_no_pair_is_named_with_its_line(tmp_path,
                                                        gpt2_files):
  merges = gpt2_files['merges.txt'].split(b'\n')
  merges[3] = b'abc'
  _write(tmp_path, {'vocab.json': gpt2_files['vocab.json'],
                    'merges.txt': b'\n'.join(merges)})
  with raises_naming(reading.Unreadable, str(tmp_path / 'merges.txt'),
                     'line 4', "'abc'"):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')


# -- TSV ----------------------------------------------------------------------

SST2 = b'sentence\tlabel\nthe film is fine \t1\ndull\t0\r\ncaf\xc3\xa9 ok\t1\n'


@PROPERTY
@given(data=st.data(), bom=st.booleans())
def test_glue_tsv_is_read_or_refused_naming_the_file(tmp_path, data, bom):
  raw = data.draw(damaged((b'\xef\xbb\xbf' if bom else b'') + SST2))
  path = str(tmp_path / 'train.tsv')
  with open(path, 'wb') as f:
    f.write(raw)
  try:
    rows = glue.read_tsv('sst2', path)
  except ValueError as e:
    assert_named(e, path)
    return
  assert all(label in (0.0, 1.0) for _, _, label in rows)
  if raw.removeprefix(b'\xef\xbb\xbf') == SST2:
    assert rows == [('the film is fine ', None, 1.0), ('dull', None, 0.0),
                    ('café ok', None, 1.0)]
