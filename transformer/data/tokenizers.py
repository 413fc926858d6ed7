"""SentencePiece subword tokenizer, trained on the training text.

Id conventions match the models (`transformer.models.encoder_decoder`):
0 is padding (and the decoder's start symbol), 1 is end of sequence, 2 is
unknown, and there is no BOS. The trained model is cached in the workdir
(e.g. `<workdir>/vocab/spm.model`) so that a resumed run reuses the exact
vocabulary its checkpoint was trained with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import io
import itertools
import os
import tempfile

from absl import logging
import numpy as np
import sentencepiece as spm

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


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


def _write_atomically(path: str, data: bytes) -> None:
  """Writes via a temporary file in the same folder and a rename.

  A crash mid-write leaves at most a stray temporary file, never a partial
  `path` that `load_or_train` would later take for a finished model.
  """
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{os.path.basename(path)}.',
                             suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


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
  sample = _sample(sentences, max_sentences, seed)
  if not sample:
    raise ValueError(f'No text to train the SentencePiece model {model_path} '
                     'on: the training sentences are empty.')
  model = io.BytesIO()
  with open(os.devnull, 'w') as quiet:  # its per-iteration log is long
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_writer=model,
        vocab_size=vocab_size, model_type=model_type,
        character_coverage=character_coverage, hard_vocab_limit=False,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        logstream=quiet)
  _write_atomically(model_path, model.getvalue())


class SentencePieceTokenizer:
  """Text <-> ids with a trained SentencePiece model."""

  def __init__(self, model_path: str):
    self.model_path = model_path
    self._sp = spm.SentencePieceProcessor(model_file=model_path)
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
    # One call so that SentencePiece encodes on several threads.
    return self._sp.encode(list(texts), out_type=int, add_eos=add_eos)

  def decode(self, ids: Iterable[int]) -> str:
    """Detokenised text of the ids before the first EOS, padding skipped.

    Args:
      ids: [T] ids, e.g. a row of a padded batch or of decoder output
        (anything after EOS is whatever the decoder ran on with).
    """
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    return self._sp.decode([i for i in ids if i != PAD_ID])

  def id_to_piece(self, token_id: int) -> str:
    """The subword of an id, for plot labels ('</s>' for EOS)."""
    return self._sp.id_to_piece(int(token_id))

  def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
    """[B, T] ids -> B strings, as `decode`."""
    return [self.decode(ids) for ids in batch]


def load_or_train(model_path: str,
                  sentences_fn: Callable[[], Iterable[str]],
                  vocab_size: int, **train_kwargs) -> SentencePieceTokenizer:
  """The cached tokenizer at `model_path`, trained first if there is none.

  A model already on disk is always reused (a resumed run must keep the
  vocabulary of its checkpoint), even if `vocab_size` has changed since.

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
