"""SentencePiece training, caching and the id conventions of the models."""

import os
import random

import numpy as np
import pytest
import sentencepiece as spm

from conftest import raises_naming
from transformer.data import tokenization

WORDS = ('house tree river stone blue green the a runs sees quick slow '
         'Haus Baum Fluss über grün läuft sieht schnell langsam').split()


def sentences(n, seed=0):
  rng = random.Random(seed)
  out = []
  for _ in range(n):
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 10))]
    out.append(' '.join(words).capitalize() + rng.choice('.!?'))
  return out


CORPUS = sentences(3000)


@pytest.fixture(scope='module')
def model_path(tmp_path_factory):
  path = str(tmp_path_factory.mktemp('vocab') / 'spm.model')
  tokenization.train_sentencepiece(CORPUS, path, vocab_size=200)
  return path


@pytest.fixture(scope='module')
def tokenizer(model_path):
  return tokenization.SentencePieceTokenizer(model_path)


def test_special_ids(tokenizer):
  assert (tokenization.PAD_ID, tokenization.EOS_ID, tokenization.UNK_ID) == (0, 1, 2)
  sp = spm.SentencePieceProcessor(model_file=tokenizer.model_path)
  assert sp.id_to_piece([0, 1, 2]) == ['<pad>', '</s>', '<unk>']
  assert sp.bos_id() == -1
  ids = tokenizer.encode(CORPUS[0])
  assert ids[-1] == 1 and 1 not in ids[:-1] and 0 not in ids
  assert tokenizer.encode(CORPUS[0], add_eos=False) == ids[:-1]
  assert 2 in tokenizer.encode('Ω', add_eos=False)  # never seen in training


def test_vocab_size_is_a_ceiling(tokenizer):
  # 200 pieces is more than this corpus supports; training must still work.
  assert 3 < tokenizer.vocab_size <= 200
  ids = np.concatenate([tokenizer.encode(s) for s in CORPUS[:200]])
  assert ids.max() < tokenizer.vocab_size


@pytest.mark.parametrize('text', CORPUS[:20] + sentences(20, seed=1))
def test_round_trip(tokenizer, text):
  assert tokenizer.decode(tokenizer.encode(text)) == text


def test_decode_stops_at_eos_and_skips_padding(tokenizer):
  first, second = tokenizer.encode('Quick river.'), tokenizer.encode('Blue!')
  assert tokenizer.decode(first + second + [0, 0]) == 'Quick river.'
  assert tokenizer.decode([0] + first[:-1] + [0, 0]) == 'Quick river.'
  assert tokenizer.decode(np.array(first[:-1] + [0, 0])) == 'Quick river.'
  padded = np.zeros((2, 12), np.int32)
  padded[0, :len(first)] = first
  padded[1, :len(second)] = second
  assert tokenizer.decode_batch(padded) == ['Quick river.', 'Blue!']


def test_encode_batch(tokenizer):
  texts = CORPUS[:5]
  assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]
  assert tokenizer.encode_batch(texts, add_eos=False) == [
      tokenizer.encode(t, add_eos=False) for t in texts]


def test_load_or_train_trains_once_then_reuses(tmp_path, monkeypatch):
  path = str(tmp_path / 'vocab' / 'spm.model')
  calls = []

  def corpus():
    calls.append(1)
    return iter(CORPUS)

  first = tokenization.load_or_train(path, corpus, 100)
  assert calls == [1]
  # Written by a rename: nothing else is left in the folder.
  assert os.listdir(tmp_path / 'vocab') == ['spm.model']
  mtime = os.path.getmtime(path)

  def no_training(*args, **kwargs):
    raise AssertionError('retrained although a model exists')

  monkeypatch.setattr(tokenization, 'train_sentencepiece', no_training)
  second = tokenization.load_or_train(path, corpus, 100)
  assert calls == [1] and os.path.getmtime(path) == mtime
  assert second.encode(CORPUS[7]) == first.encode(CORPUS[7])


def test_failed_write_leaves_no_model(tmp_path, monkeypatch):
  def crash(*args):
    raise OSError('disk full')

  monkeypatch.setattr(tokenization.os, 'replace', crash)
  with pytest.raises(OSError, match='disk full'):
    tokenization.train_sentencepiece(CORPUS, str(tmp_path / 'spm.model'), 100)
  assert os.listdir(tmp_path) == []


def test_sampling_is_deterministic_and_bounded(tmp_path):
  paths = [str(tmp_path / f'{i}.model') for i in range(2)]
  for path in paths:
    tokenization.train_sentencepiece(iter(CORPUS), path, 100,
                                   max_sentences=500)
  with open(paths[0], 'rb') as a, open(paths[1], 'rb') as b:
    assert a.read() == b.read()

  lines = [str(i) for i in range(100_000)]
  sample = tokenization._sample(iter(lines), 1000, seed=0)
  assert sample == tokenization._sample(iter(lines), 1000, seed=0)
  assert len(set(sample)) == 1000
  # Uniform over the corpus, not its head: mean index near 50,000.
  assert abs(np.mean([int(s) for s in sample]) - 50_000) < 3_000
  assert tokenization._sample(iter(lines[:10]), 1000, seed=0) == lines[:10]


def test_rejects_model_with_other_ids(tmp_path):
  path = str(tmp_path / 'default_ids.model')
  with open(os.devnull, 'w') as quiet:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=path[:-len('.model')],
        vocab_size=60, hard_vocab_limit=False, logstream=quiet)
  with raises_naming(ValueError, path, '(-1, 2, 0, 1)', '(0, 1, 2, -1)',
                     'Delete it'):
    tokenization.SentencePieceTokenizer(path)


def test_the_batch_helpers_and_the_eos_cut_have_one_home():
  """Every tokenizer takes `encode_batch`/`decode_batch` from
  `tokenization.Batches` (SentencePiece alone encodes a batch in one call,
  on several threads), and cuts ids at EOS with `ids_before_eos`, which
  refuses an id outside the vocabulary."""
  import ast  # pylint: disable=g-import-not-at-top
  import inspect  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from transformer.data import published_tokenizers
  defined = []
  for module in (tokenization, published_tokenizers):
    for node in ast.walk(ast.parse(inspect.getsource(module))):
      if isinstance(node, ast.ClassDef):
        defined += [(node.name, f.name) for f in node.body
                    if isinstance(f, ast.FunctionDef)
                    and f.name in ('encode_batch', 'decode_batch')
                    or isinstance(f, ast.FunctionDef)
                    and f.name.endswith('before_eos')]
  assert sorted(defined) == [
      ('Batches', 'decode_batch'), ('Batches', 'encode_batch'),
      ('SentencePieceTokenizer', 'encode_batch'),
      ('Tokenizer', 'decode_batch'), ('Tokenizer', 'encode_batch')]
  # pylint: disable-next=protected-access
  chars = tokenization.CharTokenizer._from_units(['a', 'b'])
  for tokenizer in (tokenization.ByteTokenizer(), chars):
    assert isinstance(tokenizer, tokenization.Tokenizer)
    assert tokenizer.decode_batch([tokenizer.encode('ab')]) == ['ab']
    with raises_naming(ValueError, f'Id {tokenizer.vocab_size}',
                       'outside the vocabulary'):
      tokenizer.decode([tokenizer.vocab_size])


def test_a_document_past_sentencepieces_limit_trains_on_its_lines(tmp_path):
  """SentencePiece skips any sentence over 4,192 bytes: a whole file read
  as one document (tiny Shakespeare with per=file) once left it nothing,
  and it failed inside its C++ code."""
  lines = [f'line {i} of a long play, with words {i % 7} and {i % 5}.'
           for i in range(400)]
  document = '\n'.join(lines)
  assert len(document.encode()) > 4 * 4192
  path = str(tmp_path / 'spm.model')
  tokenization.train_sentencepiece([document], path, vocab_size=60)
  tokenizer = tokenization.SentencePieceTokenizer(path)
  assert tokenizer.decode(tokenizer.encode(lines[3])) == lines[3]


def test_text_of_only_overlong_lines_is_refused_naming_the_limit(tmp_path):
  with raises_naming(ValueError, 'spm.model', '1 lines', '4,192 bytes',
                     "tokenizer='byte' or 'char'"):
    tokenization.train_sentencepiece(['x' * 5000], str(tmp_path / 'spm.model'),
                                     vocab_size=60)
  with raises_naming(ValueError, 'spm.model', 'training text is empty'):
    tokenization.train_sentencepiece(['', ''], str(tmp_path / 'spm.model'),
                                     vocab_size=60)
