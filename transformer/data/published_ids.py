"""Our ids of a published vocabulary: one rule for every converted family.

Every batcher, mask, loss and decoder here reads padding as id 0 and EOS as
id 1 (`tokenization`), as T5's SentencePiece vocabularies number them. A
published vocabulary keeps its own ids in its files; `IdOrder` maps them to
ours by one rule, whatever the family: its padding token at 0 (a new id
where it has none, as GPT-2 and Llama), its EOS at 1, its unknown token at
2 where it has one, its other ids after in their own order, and `last` ids
at the end (BERT's [MASK], which the masked-LM task keeps past the text
ids). The same order moves a checkpoint's embedding rows when it is
converted and moves them back when it is exported, so export restores the
published tensors exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The order's entry for an id the published vocabulary lacks (padding).
NEW = -1


class IdOrder:
  """`order[our_id]` = the published id (`NEW` for added padding)."""

  def __init__(self, order: Sequence[int]):
    """Checks that `order` lists each published id once, `NEW` at most at 0.

    Raises:
      ValueError: naming what is wrong with the order.
    """
    order = np.asarray(order, np.int64)
    published = order[order != NEW]
    if order.ndim != 1 or (order[1:] == NEW).any() or not np.array_equal(
        np.sort(published), np.arange(len(published))):
      raise ValueError(
          f'An id order of {order.size} entries must list the published ids '
          f'0..{published.size - 1} once each, with {NEW} (padding the '
          f'vocabulary lacks) only first: the vocabulary file is damaged; '
          f'convert the checkpoint again.')
    self.order = order
    self._ours = np.empty(len(published), np.int64)
    self._ours[published] = np.flatnonzero(order != NEW)

  @classmethod
  def of(cls, size: int, *, eos: int, pad: int | None = None,
         unk: int | None = None, last: Sequence[int] = ()) -> IdOrder:
    """The order of a published vocabulary of `size` ids with these
    special ids (`pad` None: it has no padding token, one is added).

    Raises:
      ValueError: a special id outside the vocabulary, or two the same.
    """
    special = [i for i in (pad, eos, unk, *last) if i is not None]
    if any(not 0 <= i < size for i in special) or len(set(special)) != len(
        special):
      raise ValueError(
          f'Special ids pad={pad}, eos={eos}, unk={unk}, last={list(last)} '
          f'must be distinct ids of the {size:,}-id vocabulary: config.json '
          f'and the tokenizer files come from different models; download '
          f'them together.')
    first = [NEW if pad is None else pad, eos] + (
        [] if unk is None else [unk])
    rest = np.setdiff1d(np.arange(size), special)
    return cls(np.concatenate([np.asarray(first, np.int64), rest,
                               np.asarray(last, np.int64)]))

  def __len__(self) -> int:
    """How many ids of ours: the published ones, plus added padding."""
    return len(self.order)

  @property
  def published_size(self) -> int:
    return len(self._ours)

  @property
  def added_padding(self) -> bool:
    return bool(self.order[0] == NEW)

  def to_ours(self, ids) -> np.ndarray:
    """Published ids -> ours."""
    return self._ours[np.asarray(ids, np.int64)]

  def to_published(self, ids) -> np.ndarray:
    """Our ids -> published ones.

    Raises:
      ValueError: added padding, which has no published id.
    """
    published = self.order[np.asarray(ids, np.int64)]
    if (published == NEW).any():
      raise ValueError('Padding (id 0) has no id in the published '
                       'vocabulary: drop it before decoding.')
    return published

  def rows(self, table, axis: int = 0) -> np.ndarray:
    """A published table (embedding rows, an output layer's columns along
    `axis`) in our order, a zero entry for added padding."""
    table = np.asarray(table)
    ours = np.take(table, np.maximum(self.order, 0), axis=axis)
    if self.added_padding:
      index = [slice(None)] * table.ndim
      index[axis] = 0
      ours[tuple(index)] = 0
    return ours

  def published_rows(self, table, axis: int = 0) -> np.ndarray:
    """The inverse of `rows`: our table in the published order, without
    added padding."""
    return np.take(np.asarray(table), self._ours, axis=axis)

  def to_json(self) -> dict:
    return {'order': self.order.tolist()}
