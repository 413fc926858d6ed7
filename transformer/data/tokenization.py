"""Tokenizers: SentencePiece subwords, UTF-8 bytes and characters; ids pad 0, EOS 1, unk 2.

Id conventions match the models (`transformer.models.encoder_decoder`):
0 is padding (and the decoder's start symbol), 1 is end of sequence, 2 is
unknown, and there is no BOS. The trained model is cached in the workdir
(e.g. `<workdir>/vocab/spm.model`) so that a resumed run reuses the exact
vocabulary its checkpoint was trained with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import collections
from typing import Protocol, runtime_checkable
import io
import itertools
import json
import os
import re

from absl import logging
import numpy as np
import sentencepiece as spm

from transformer import storage

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


@runtime_checkable
class Tokenizer(Protocol):
  """What tasks, decoders and commands use of a vocabulary: every class
  here and in `published_tokenizers` is one (ids as this module's
  docstring says)."""

  @property
  def vocab_size(self) -> int:
    """Ids are 0 .. vocab_size - 1."""

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    """The ids of a text, EOS last if `add_eos`."""

  def decode(self, ids: Iterable[int]) -> str:
    """The text of the ids before the first EOS, padding skipped."""

  def encode_batch(self, texts: Sequence[str],
                   add_eos: bool = True) -> list[list[int]]:
    """`encode` of each text."""

  def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
    """[B, T] ids -> B strings, as `decode`."""

  def id_to_piece(self, token_id: int) -> str:
    """A label for plots."""


class Batches:
  """The batch methods of a `Tokenizer`, from its `encode` and `decode`:
  one implementation for every tokenizer."""

  def encode_batch(self, texts: Sequence[str],
                   add_eos: bool = True) -> list[list[int]]:
    """`encode` of each text."""
    return [self.encode(text, add_eos) for text in texts]

  def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
    """[B, T] ids -> B strings, as `decode`."""
    return [self.decode(ids) for ids in batch]


def ids_before_eos(ids: Iterable[int], vocab_size: int) -> list[int]:
  """The ids before the first EOS, padding dropped, each checked in range.

  Raises:
    ValueError: an id outside [0, vocab_size), which would otherwise index
      from the end of a table or wrap around.
  """
  ids = [int(i) for i in ids]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  for i in ids:
    if not 0 <= i < vocab_size:
      raise ValueError(f'Id {i} is outside the vocabulary [0, {vocab_size}).')
  return [i for i in ids if i != PAD_ID]


def _sample(sentences: Iterable[str], k: int, seed: int) -> list[str]:
  """Uniform sample of at most k sentences (reservoir sampling, Algorithm R).

  Holds only k sentences in memory whatever the corpus size, and the sample
  depends only on the corpus and the seed. Random draws are made a chunk at
  a time because a python-level draw per sentence is slow on 10^7 lines.
  """
  it = iter(sentences)
  reservoir = list(itertools.islice(it, k))
  rng = np.random.default_rng(seed)
  seen = len(reservoir)
  while chunk := list(itertools.islice(it, 1 << 16)):
    # Sentence number i (0-based) replaces slot j ~ U[0, i] when j < k.
    slots = rng.integers(0, np.arange(seen, seen + len(chunk)) + 1)
    for i in np.flatnonzero(slots < k):
      reservoir[slots[i]] = chunk[i]
    seen += len(chunk)
  if seen > k:
    logging.info('SentencePiece: trained on %d of %d sentences.', k, seen)
  return reservoir


# SentencePiece trains on sentences of at most this many bytes and skips
# longer ones without a word.
_MAX_SENTENCE_BYTES = 4192


class _Lines:
  """Training sentences as SentencePiece can read them: blank ones left
  out, a text longer than its limit (a whole document or file) split into
  its lines, and lines still too long left out and counted in
  `too_long`."""

  def __init__(self, sentences: Iterable[str]):
    self._sentences = sentences
    self.too_long = 0

  def __iter__(self):
    for sentence in self._sentences:
      if not sentence.strip():
        continue  # nothing to learn from, and SentencePiece fails on none
      if len(sentence.encode('utf-8')) <= _MAX_SENTENCE_BYTES:
        yield sentence
        continue
      for line in sentence.splitlines():
        if len(line.encode('utf-8')) > _MAX_SENTENCE_BYTES:
          self.too_long += 1
        elif line.strip():
          yield line


def train_sentencepiece(sentences: Iterable[str], model_path: str,
                        vocab_size: int, *, model_type: str = 'unigram',
                        character_coverage: float = 1.0,
                        max_sentences: int = 1_000_000,
                        seed: int = 0) -> None:
  """Trains a SentencePiece model in-process and writes it to `model_path`.

  Args:
    sentences: training text, one sentence (or line) per item; for parallel
      data pass both sides so that one shared vocabulary covers them.
    model_path: where the `.model` file goes (folders are created).
    vocab_size: target vocabulary size. It is a ceiling, not a demand
      (`hard_vocab_limit=False`): a small corpus gets a smaller vocabulary
      instead of an error. Read the actual size from the tokenizer.
    model_type: 'unigram', 'bpe', 'char' or 'word'.
    character_coverage: fraction of characters covered; 1.0 suits small
      alphabets, 0.9995 is usual for CJK.
    max_sentences: corpora larger than this are sampled uniformly (and
      deterministically, from `seed`) down to it, bounding memory and time.
    seed: seed of that sample.
  """
  if vocab_size <= _FIRST_ID:
    raise ValueError(
        f'config.data.vocab_size={vocab_size} leaves no room for text: '
        f'{_FIRST_ID} ids are special (padding, end of sequence, unknown); '
        f'use at least {_FIRST_ID + 1}, in practice hundreds or more.')
  lines = _Lines(sentences)
  sample = _sample(lines, max_sentences, seed)
  if lines.too_long:
    logging.warning(
        'SentencePiece: left out %d lines longer than its limit of %d '
        'bytes from the vocabulary\'s training text (they are still '
        'tokenized).', lines.too_long, _MAX_SENTENCE_BYTES)
  if not sample:
    raise ValueError(
        f'No text to train the SentencePiece model {model_path} on: the '
        f'training text is empty' + (
            f', or each of its {lines.too_long:,} lines is longer than '
            f'SentencePiece\'s limit of {_MAX_SENTENCE_BYTES:,} bytes: '
            f'break the text into lines, or use config.data.tokenizer='
            f"'byte' or 'char'" if lines.too_long else '') + '.')
  model = io.BytesIO()
  with open(os.devnull, 'w') as quiet:  # its per-iteration log is long
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_writer=model,
        vocab_size=vocab_size, model_type=model_type,
        character_coverage=character_coverage, hard_vocab_limit=False,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        max_sentence_length=_MAX_SENTENCE_BYTES, logstream=quiet)
  storage.write_atomically(model_path, model.getvalue())


# A damaged vocabulary cannot be rebuilt in place: checkpoints trained with
# it need its exact ids.
_RESTORE = ('Restore it from a copy, or train into a new workdir (which '
            'builds its own vocabulary).')


def _load_sentencepiece(model_path: str) -> spm.SentencePieceProcessor:
  """The SentencePiece model in `model_path`; a damaged file (cut short,
  garbled, empty) is refused naming it, where SentencePiece would raise a
  RuntimeError that names neither the file nor the fix."""
  if not os.path.isfile(model_path):
    raise FileNotFoundError(f'No SentencePiece model {model_path}.')
  try:
    return spm.SentencePieceProcessor(model_file=model_path)
  except (RuntimeError, OSError):
    raise ValueError(f'{model_path} is not a SentencePiece model: the file '
                     f'is damaged (cut short or garbled). {_RESTORE}'
                     ) from None


class SentencePieceTokenizer(Batches):
  """Text <-> ids with a trained SentencePiece model."""

  def __init__(self, model_path: str):
    self.model_path = model_path
    self._sp = _load_sentencepiece(model_path)
    ids = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(),
           self._sp.bos_id())
    if ids != (PAD_ID, EOS_ID, UNK_ID, -1):
      raise ValueError(
          f'{model_path} has pad/eos/unk/bos ids {ids}, but the models need '
          f'({PAD_ID}, {EOS_ID}, {UNK_ID}, -1). Delete it so that it is '
          'retrained, or train it with `train_sentencepiece`.')

  @property
  def vocab_size(self) -> int:
    return self._sp.vocab_size()

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    return self._sp.encode(text, out_type=int, add_eos=add_eos)

  def encode_batch(self, texts: Sequence[str],
                   add_eos: bool = True) -> list[list[int]]:
    # One call, so that SentencePiece encodes on several threads.
    return self._sp.encode(list(texts), out_type=int, add_eos=add_eos)

  def decode(self, ids: Iterable[int]) -> str:
    """Detokenised text of the ids before the first EOS, padding skipped.

    Args:
      ids: [T] ids, e.g. a row of a padded batch or of decoder output
        (anything after EOS is whatever the decoder ran on with).
    """
    return self._sp.decode(ids_before_eos(ids, self.vocab_size))

  def id_to_piece(self, token_id: int) -> str:
    """The subword of an id, for plot labels ('</s>' for EOS)."""
    return self._sp.id_to_piece(int(token_id))


def load_or_train(model_path: str,
                  sentences_fn: Callable[[], Iterable[str]],
                  vocab_size: int, **train_kwargs) -> SentencePieceTokenizer:
  """The cached tokenizer at `model_path`, trained first if there is none.

  A model already on disk is always reused (a resumed run must keep the
  vocabulary of its checkpoint), even if `vocab_size` has changed since:
  a training run has already removed one built from other settings that
  nothing is trained on yet, and refused such settings for one that
  checkpoints depend on (`tasks.vocabularies.check_built_from`).

  Args:
    model_path: e.g. `<workdir>/vocab/spm.model`.
    sentences_fn: returns the training text; only called when training, so
      that a resume does not read the corpus.
    vocab_size: target vocabulary size (see `train_sentencepiece`).
    **train_kwargs: other arguments of `train_sentencepiece`.
  """
  if os.path.exists(model_path):
    logging.info('Reusing the SentencePiece model %s.', model_path)
  else:
    logging.info('Training a SentencePiece model of %d pieces into %s.',
                 vocab_size, model_path)
    train_sentencepiece(sentences_fn(), model_path, vocab_size,
                        **train_kwargs)
  tokenizer = SentencePieceTokenizer(model_path)
  logging.info('Vocabulary size %d.', tokenizer.vocab_size)
  return tokenizer


# Pieces of the special ids, as SentencePiece names them.
_SPECIAL_PIECES = {PAD_ID: '<pad>', EOS_ID: '</s>', UNK_ID: '<unk>'}
# Byte and character ids start after the special ids.
_FIRST_ID = 3
# What an unknown id decodes to: U+FFFD, as for an invalid byte.
_REPLACEMENT = '\ufffd'


def _readable(character: str) -> str:
  """The character itself if printable, else its escape ('\\n', '\\x00')."""
  if character.isprintable():
    return character
  return character.encode('unicode_escape').decode('ascii')


class ByteTokenizer(Batches):
  """Text <-> ids over UTF-8 bytes: nothing to train, no unknown text.

  Id = byte + 3, after pad 0, EOS 1 and 2 (unknown, never produced by
  `encode`), so the ids fit the models like SentencePiece's. A character
  outside ASCII is several ids ('é' is 2 bytes, '✓' is 3).
  """

  @property
  def vocab_size(self) -> int:
    return _FIRST_ID + 256

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    ids = [byte + _FIRST_ID for byte in text.encode('utf-8')]
    return ids + [EOS_ID] if add_eos else ids

  def decode(self, ids: Iterable[int]) -> str:
    """Text of the ids before the first EOS, padding skipped.

    A model may emit byte sequences that are not UTF-8 (a lead byte without
    its continuation bytes, say); they decode to U+FFFD rather than raising,
    as does the unknown id 2.

    Args:
      ids: [T] ids, e.g. a row of a padded batch or of decoder output.
    """
    data = bytearray()
    for i in ids_before_eos(ids, self.vocab_size):
      data += (_REPLACEMENT.encode('utf-8') if i == UNK_ID
               else bytes([i - _FIRST_ID]))
    return data.decode('utf-8', errors='replace')

  def id_to_piece(self, token_id: int) -> str:
    """A label for plots: 'a', '\\n', '\\xc3' (part of a longer character),
    '</s>'."""
    token_id = int(token_id)
    if token_id in _SPECIAL_PIECES:
      return _SPECIAL_PIECES[token_id]
    byte = token_id - _FIRST_ID
    return _readable(chr(byte)) if byte < 0x80 else f'\\x{byte:02x}'


def _read_units(path: str, kind: str):
  """The value under `kind` in the JSON file `path`, a damaged file (cut
  short, not UTF-8, not JSON, another vocabulary's) refused naming it."""
  with open(path, 'rb') as f:
    raw = f.read()
  try:
    saved = json.loads(raw.decode('utf-8'))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f'{path} is not a vocabulary file ({e}): it is '
                     f'damaged. {_RESTORE}') from None
  if not isinstance(saved, dict) or kind not in saved:
    raise ValueError(f'{path} holds no {kind!r} key: it is not a vocabulary '
                     f'of {kind}. {_RESTORE}')
  return saved[kind]


class _VocabularyTokenizer(Batches):
  """Text <-> ids over a list of units (characters, words) of a training
  text, shared by `CharTokenizer` and `WordTokenizer`.

  Id = index of the unit + 3, after pad 0, EOS 1 and unknown 2 (units not in
  the training text). The units are saved as JSON under the key `kind`, so
  that a resumed run keeps the ids its checkpoint was trained with.
  """
  kind: str  # 'characters' or 'words': the JSON key, and for messages

  def __init__(self, path: str):
    """Loads the units that `save` wrote to `path`."""
    units = _read_units(path, self.kind)
    self._check(units, path)
    self._init(units)

  @classmethod
  def _from_units(cls, units):
    if not units:
      raise ValueError(f'No text to build the vocabulary of {cls.kind} from: '
                       'the training texts are empty.')
    tokenizer = cls.__new__(cls)
    tokenizer._init(units)
    return tokenizer

  @classmethod
  def load_or_build(cls, path: str, texts_fn: Callable[[], Iterable[str]]):
    """The tokenizer saved at `path`, built and saved if there is none.

    As `load_or_train`: a vocabulary already on disk is always reused, so
    that a resumed run keeps the ids of its checkpoint.

    Args:
      path: e.g. `<workdir>/vocab/chars.json`.
      texts_fn: returns the training text; only called when building, so
        that a resume does not read the corpus.
    """
    if os.path.exists(path):
      logging.info('Reusing the vocabulary %s.', path)
      return cls(path)
    tokenizer = cls.build(texts_fn())
    tokenizer.save(path)
    logging.info('Built a vocabulary of %d %s into %s.', len(tokenizer.units),
                 cls.kind, path)
    return tokenizer

  def _init(self, units) -> None:
    self.units = units
    self._ids = {u: i + _FIRST_ID for i, u in enumerate(units)}

  def save(self, path: str) -> None:
    """Writes the units as JSON, atomically (folders are created)."""
    text = json.dumps({self.kind: self.units}, ensure_ascii=False)
    storage.write_atomically(path, text.encode('utf-8'))

  @property
  def vocab_size(self) -> int:
    return _FIRST_ID + len(self.units)

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    ids = [self._ids.get(u, UNK_ID) for u in self._split(text)]
    return ids + [EOS_ID] if add_eos else ids

  def decode(self, ids: Iterable[int]) -> str:
    """Text of the ids before the first EOS, padding skipped, U+FFFD for
    the unknown id.

    Args:
      ids: [T] ids, e.g. a row of a padded batch or of decoder output.
    """
    return self._join([_REPLACEMENT if i == UNK_ID
                       else self.units[i - _FIRST_ID]
                       for i in ids_before_eos(ids, self.vocab_size)])

  def id_to_piece(self, token_id: int) -> str:
    """A label for plots: the unit ('\\n' escaped), or '</s>'."""
    token_id = int(token_id)
    if token_id in _SPECIAL_PIECES:
      return _SPECIAL_PIECES[token_id]
    return _readable(self.units[token_id - _FIRST_ID])


class CharTokenizer(_VocabularyTokenizer):
  """Ids over the characters (code points) of a training text, saved e.g.
  in `<workdir>/vocab/chars.json` (see `_VocabularyTokenizer`)."""
  kind = 'characters'

  @staticmethod
  def _check(characters, path: str) -> None:
    if not isinstance(characters, str) or list(characters) != sorted(
        set(characters)):
      raise ValueError(f'{path} does not hold a string of sorted, distinct '
                       'characters. Delete it so that it is rebuilt.')

  @classmethod
  def build(cls, texts: Iterable[str]) -> CharTokenizer:
    """A tokenizer over every character that occurs in `texts`."""
    characters = set()
    for text in texts:
      characters.update(text)
    return cls._from_units(''.join(sorted(characters)))

  @property
  def characters(self) -> str:
    return self.units

  _split = staticmethod(list)
  _join = staticmethod(''.join)


class WordTokenizer(_VocabularyTokenizer):
  """Ids over the whitespace-separated words of a training text, for
  word-level language models (Penn Treebank).

  Every word of the training text gets an id in order of decreasing
  frequency (ties alphabetical). A line break is a word of its own, so a
  corpus read as one stream keeps its sentence ends (PTB's end-of-sentence
  tokens). Decoding joins words with single spaces. Saved e.g. in
  `<workdir>/vocab/words.json`.
  """
  kind = 'words'

  @staticmethod
  def _check(words, path: str) -> None:
    if not isinstance(words, list) or len(set(words)) != len(words):
      raise ValueError(f'{path} does not hold a list of distinct words. '
                       'Delete it so that it is rebuilt.')

  @classmethod
  def build(cls, texts: Iterable[str]) -> WordTokenizer:
    counts = collections.Counter()
    for text in texts:
      counts.update(_words(text))
    return cls._from_units(sorted(counts, key=lambda w: (-counts[w], w)))

  @property
  def words(self) -> list[str]:
    return self.units

  @staticmethod
  def _split(text: str) -> list[str]:
    return _words(text)

  @staticmethod
  def _join(words: list[str]) -> str:
    return ' '.join(words).replace(' \n ', '\n').replace(' \n', '\n')


def _words(text: str) -> list[str]:
  """Whitespace-separated words, each line break a word of its own."""
  return re.findall(r'\n|[^\s]+', text)
