"""Documents for language modelling, and the examples a decoder trains on.

A document is a string: a file, a line of a file, or a generated paragraph.
Sources:

- `offline_documents` / `offline_splits`: paragraphs of English sentences
  from the grammar of `offline_mt`, generated in-process (no files, no
  network), for the default run and the tests;
- `read_documents`: local plain text, e.g. tiny Shakespeare (one file, one
  document, cut with `split_text` as nanoGPT does) or PTB (one sentence a
  line);
- `tfds_reader.load_text`: TFDS datasets such as lm1b.

`lm_examples` turns tokenised documents into the (inputs, targets) pairs
that `packing.pack` and `packing.PackedTrainBatches` pack into rows.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
import random

from absl import logging
import numpy as np

from transformer.data import batching
from transformer.data import reading
from transformer.data import tokenization
from transformer.data.generated import offline_mt

_PER = ('file', 'line')


def _sample_document(rng: random.Random, max_sentences: int) -> str:
  """1..max_sentences capitalised sentences ending with '.', space-joined."""
  sentences = []
  for _ in range(rng.randint(1, max_sentences)):
    words = offline_mt.sample_sentence(rng).english()
    sentences.append(words[0].upper() + words[1:] + '.')
  return ' '.join(sentences)


def offline_documents(num_documents: int, seed: int,
                      max_sentences: int = 8) -> list[str]:
  """Returns `num_documents` generated documents, the same for a seed.

  Documents are drawn independently, so a long list may (rarely) repeat
  one; use `offline_splits` for a held-out set.
  """
  if max_sentences < 1:
    raise ValueError(f'max_sentences must be >= 1, got {max_sentences}.')
  # A string seed is hashed with SHA-512: reproducible across processes.
  rng = random.Random(f'{seed}')
  return [_sample_document(rng, max_sentences) for _ in range(num_documents)]


def offline_splits(num_train: int, num_eval: int, seed: int,
                   max_sentences: int = 8) -> dict[str, list[str]]:
  """Returns 'train' and 'validation' documents, none of them repeated.

  No document occurs twice, within a split or across splits, so that the
  validation loss is measured on text the model has not seen. Each split
  draws from its own random stream, validation first, so the validation set
  depends only on (num_eval, seed, max_sentences), not on `num_train`.
  """
  if max_sentences < 1:
    raise ValueError(f'max_sentences must be >= 1, got {max_sentences}.')
  seen = set()
  result = {}
  for split, count in (('validation', num_eval), ('train', num_train)):
    rng = random.Random(f'{split}:{seed}')
    documents = []
    while len(documents) < count:
      document = _sample_document(rng, max_sentences)
      if document not in seen:
        seen.add(document)
        documents.append(document)
    result[split] = documents
  return result


def _text_files(path: str) -> list[str]:
  """`path` itself if a file, else the sorted `*.txt` files in the folder."""
  if os.path.isfile(path):
    return [path]
  if not os.path.isdir(path):
    raise FileNotFoundError(
        f'Text path {path!r} does not exist. Pass a UTF-8 text file, or a '
        'folder of .txt files.')
  names = sorted(name for name in os.listdir(path) if name.endswith('.txt')
                 and os.path.isfile(os.path.join(path, name)))
  if not names:
    raise FileNotFoundError(
        f'No .txt files in the folder {path}; it holds '
        f'{sorted(os.listdir(path))[:10]}. Name the text files *.txt, or '
        'pass the path of one file.')
  return [os.path.join(path, name) for name in names]


def read_documents(path: str, *, per: str = 'file') -> list[str]:
  """Returns the documents of local UTF-8 text.

  Args:
    path: a text file, or a folder: then its `*.txt` files, in sorted order.
    per: 'file': each file is one document, its text unchanged; 'line':
      each line is one document, stripped of surrounding whitespace. Empty
      documents (files, or blank lines) are dropped and counted in the log.

  Raises:
    FileNotFoundError: `path` does not exist, or is a folder without .txt
      files.
    ValueError: `per` is neither 'file' nor 'line'.
  """
  if per not in _PER:
    raise ValueError(f"per must be 'file' (a document per file) or 'line' "
                     f'(a document per line), got {per!r}.')
  documents = []
  for file in _text_files(path):
    # The text as it is on disk: byte counts are the file's.
    if per == 'file':
      documents.append(reading.text(file))
    else:
      documents += [line.strip() for line in reading.lines(file)]
  kept = [document for document in documents if document]
  if dropped := len(documents) - len(kept):
    logging.info('Dropped %d empty of %d %ss in %s.', dropped,
                 len(documents), per, path)
  return kept


def split_text(text: str, train_fraction: float) -> tuple[str, str]:
  """The first `train_fraction` of the characters, and the rest.

  The split of nanoGPT's character-level tiny Shakespeare (0.9: the first
  90% train, the last 10% validation): one long document has no natural
  held-out unit, and a contiguous tail keeps validation text unseen.
  """
  if not 0 <= train_fraction <= 1:
    raise ValueError(f'train_fraction must be in [0, 1], got '
                     f'{train_fraction}.')
  cut = int(len(text) * train_fraction)
  return text[:cut], text[cut:]


def lm_examples(documents_ids: Sequence[Sequence[int]],
                max_length: int) -> list[tuple[np.ndarray, np.ndarray]]:
  """(inputs, targets) pairs for next-token prediction, for `packing.pack`.

  A document t_1 ... t_n becomes EOS t_1 ... t_n EOS, EOS doubling as the
  start symbol (GPT-2's <|endoftext|>): inputs EOS t_1 ... t_n, targets
  t_1 ... t_n EOS, n + 1 tokens each. A document with more than
  `max_length` inputs is cut into consecutive chunks of at most `max_length`
  (chunk k's inputs begin where chunk k - 1's ended), so that every token
  and the final EOS are predicted exactly once; a chunk after the first
  does not see the text before it, as packing starts each pair afresh.

  Args:
    documents_ids: N documents, each the ids of its text without EOS
      (`tokenizer.encode(text, add_eos=False)`).
    max_length: the longest chunk, e.g. the packed row length.

  Returns:
    Pairs of int32 arrays of equal length in [1, max_length], documents in
    order, each document's chunks in order.

  Raises:
    ValueError: a document contains EOS or padding (0), or max_length < 1.
  """
  if max_length < 1:
    raise ValueError(f'max_length must be >= 1, got {max_length}.')
  if not documents_ids:
    return []
  sizes = np.array([len(ids) for ids in documents_ids])  # [N]
  tokens = np.concatenate(
      [np.asarray(ids, np.int32).reshape(-1) for ids in documents_ids])
  for token_id, what in ((tokenization.EOS_ID, 'EOS'),
                         (tokenization.PAD_ID, 'padding')):
    if (tokens == token_id).any():
      where = np.flatnonzero(tokens == token_id)[0]
      document = np.searchsorted(np.cumsum(sizes), where, side='right')
      raise ValueError(
          f'Document {document} contains id {token_id} ({what}). Encode the '
          'documents with add_eos=False: lm_examples adds the EOS symbols.')
  # One stream EOS d_1 EOS d_2 ... EOS d_N EOS: consecutive documents share
  # an EOS, the target of one and the first input of the next.
  stream = np.append(
      np.insert(tokens, np.cumsum(sizes) - sizes, tokenization.EOS_ID),
      np.int32(tokenization.EOS_ID))
  inputs, targets = stream[:-1], stream[1:]
  # Document i owns inputs [starts[i], starts[i] + lengths[i]).
  lengths = sizes + 1
  starts = np.cumsum(lengths) - lengths
  chunks = -(-lengths // max_length)  # per document, rounded up
  first_chunk = np.cumsum(chunks) - chunks
  index = np.arange(chunks.sum()) - np.repeat(first_chunk, chunks)
  cuts = (np.repeat(starts, chunks) + max_length * index)[1:]
  return list(zip(np.split(inputs, cuts), np.split(targets, cuts)))


class ShiftedLMChunks:
  """The `PackedTrainBatches(recut=...)` of language modelling: each epoch
  cuts `lm_examples`' chunks again, every document longer than `max_length`
  at a random offset of its own.

  `lm_examples` cuts a document at multiples of `max_length`, so a long
  text (tiny Shakespeare is one document) is read in the same windows,
  each from the same first token, every epoch, which a small model can
  learn by heart (nanoGPT instead samples windows at random offsets). Here
  a document of n > max_length inputs is cut at p, p + L, p + 2L, ... < n,
  with p drawn from [1, L] per document by a generator seeded by (seed,
  epoch): other windows every epoch, every token still predicted exactly
  once, the tokens themselves never copied. Documents are found once, by
  their first input (EOS): one token read per chunk, not per epoch.
  """

  def __init__(self, source: batching.Side, max_length: int, seed: int):
    lengths = source.lengths.astype(np.int64)
    first = np.asarray(source.tokens[source.starts]) == tokenization.EOS_ID
    if len(lengths) and not first[0]:
      raise ValueError('The chunks do not start with a document (EOS as its '
                       'first input): they are not lm_examples chunks.')
    self._sizes = np.bincount(np.cumsum(first) - 1,
                              weights=lengths).astype(np.int64)
    self._begins = np.cumsum(self._sizes) - self._sizes
    self._total = int(lengths.sum())
    self.max_length, self.seed = max_length, seed

  def __call__(self, epoch: int, source: batching.Side,
               target: batching.Side) -> tuple[batching.Side, batching.Side]:
    """Epoch `epoch`'s chunks of `source` and `target` (the sides this was
    made from)."""
    length, sizes = self.max_length, self._sizes
    offset = np.random.default_rng([self.seed, epoch, 1]).integers(
        1, length + 1, len(sizes))
    offset[sizes <= length] = length  # no cut
    cuts = np.maximum(0, -(-(sizes - offset) // length))  # per document
    index = np.arange(cuts.sum()) - np.repeat(np.cumsum(cuts) - cuts, cuts)
    where = np.repeat(self._begins + offset, cuts) + length * index
    bounds = np.sort(np.concatenate([self._begins, where, [self._total]]))
    chunk_lengths = np.diff(bounds)
    return (batching.Side.from_arrays(source.tokens, chunk_lengths),
            batching.Side.from_arrays(target.tokens, chunk_lengths))


def count_bytes(documents: Sequence[str]) -> int:
  """UTF-8 bytes of the documents' text (no EOS), for bits per byte."""
  return sum(len(document.encode('utf-8')) for document in documents)


def count_characters(documents: Sequence[str]) -> int:
  """Unicode characters of the documents' text (no EOS), for bits per
  character."""
  return sum(len(document) for document in documents)
