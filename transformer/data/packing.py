"""Packed training rows: consecutive examples in rows of `max_length` tokens,
so that few slots are padding. Both sides of an example go to the same row,
with the same segment id, so that a row of `inputs` and the same row of
`targets` hold the same examples in the same order:

  inputs               [R, L]  source tokens, 0 at padding
  targets              [R, L]  target tokens, 0 at padding
  inputs_segmentation  [R, L]  1, 2, ... per example in the row, 0 at padding
  targets_segmentation [R, L]  the same ids on the target side
  inputs_position      [R, L]  0, 1, ... restarting in each segment
  targets_position     [R, L]  likewise, 0 at padding

An example is a pair (source ids, target ids), as in `batching`.
"""

from __future__ import annotations

import array
import bisect
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from transformer.data.batching import Example
from transformer.data.batching import Side
from transformer.data.batching import as_sides
from transformer.data.batching import check_host
from transformer.data.batching import check_lengths
from transformer.data.batching import rows_of_width
from transformer.data.batching import sides
from transformer.sharding import HostRows

PACKED_KEYS = ('inputs', 'targets', 'inputs_segmentation',
               'targets_segmentation', 'inputs_position', 'targets_position')


def _greedy_rows(source_lengths: np.ndarray, target_lengths: np.ndarray,
                 max_length: int, order: np.ndarray | None = None,
                 window: int = 1 << 18) -> np.ndarray:
  """Next-fit packing of examples, in order, into rows of `max_length`.

  Args:
    source_lengths: [N] lengths, each in [1, max_length].
    target_lengths: [N] lengths, each in [1, max_length].
    max_length: row length L.
    order: the examples' order, a permutation of N ([N] ids); None: as
      they come.
    window: examples planned at a time (the memory it takes is a few
      arrays of this size, whatever N).

  Returns:
    [R + 1] offsets into the order: row r holds its examples starts[r] to
    starts[r + 1] - 1.
  """
  count = len(source_lengths)
  # 8 bytes a row (a list of ints would be 36): an epoch has ~N / 10 rows.
  starts = array.array('q', [0])
  while starts[-1] < count:
    # For every i of the window, the first example that no longer fits in a
    # row beginning at i (on either side), found for the whole window at
    # once; the python loop below then only visits row starts. Each length
    # is at least 1, so a row from i ends by i + L: the window's sums need
    # L examples beyond it.
    begin = starts[-1]
    end = min(count, begin + window)
    ids = np.arange(begin, min(count, end + max_length))
    if order is not None:
      ids = order[ids]
    following = None
    for lengths in (source_lengths, target_lengths):
      cum = np.concatenate([[0], np.cumsum(lengths[ids], dtype=np.int64)])
      ends = np.searchsorted(cum, cum[:end - begin] + max_length,
                             side='right') - 1 + begin
      following = ends if following is None else np.minimum(following, ends)
    while starts[-1] < end:
      starts.append(int(following[starts[-1] - begin]))
  return np.frombuffer(starts, np.int64)


def _pack_rows(source: Side, target: Side, ids: np.ndarray,
               row_starts: np.ndarray,
               max_length: int) -> dict[str, np.ndarray]:
  """Packed rows of `PACKED_KEYS`, [R, L] each.

  Args:
    source: source side of all examples.
    target: target side of all examples.
    ids: [K] the examples to pack, row after row.
    row_starts: [R + 1] offsets into `ids` of each row.
    max_length: row length L.
  """
  num_rows = len(row_starts) - 1
  row = np.repeat(np.arange(num_rows), np.diff(row_starts))
  segment = np.arange(len(ids)) - row_starts[row] + 1
  batch = {}
  for side, prefix in ((source, 'inputs'), (target, 'targets')):
    tokens, within, lengths, begins = side.gather(ids)
    first_column = begins - begins[row_starts[row]]
    r = np.repeat(row, lengths)
    c = np.repeat(first_column, lengths) + within
    for key, values in ((prefix, tokens),
                        (f'{prefix}_segmentation', np.repeat(segment, lengths)),
                        (f'{prefix}_position', within)):
      batch[key] = np.zeros((num_rows, max_length), np.int32)
      batch[key][r, c] = values
  return batch


def pack(examples: Sequence[Example],
         max_length: int) -> dict[str, np.ndarray]:
  """Packs examples, in order, into [R, max_length] rows of `PACKED_KEYS`.

  A new row starts when the next example's source or target would overflow
  the current one.
  """
  source, target = sides(examples, max_length)
  starts = _greedy_rows(source.lengths, target.lengths, max_length)
  return _pack_rows(source, target, np.arange(len(examples)), starts,
                    max_length)


class PackedTrainBatches(Iterator[dict[str, np.ndarray]]):
  """Endless, deterministic, resumable packed training batches.

  Epoch e shuffles the examples with a generator seeded by (seed, e) and
  packs them into rows. The rows of all epochs form one stream, cut into
  batches of `rows_per_batch` rows: the rows left over at the end of an epoch
  begin the first batch of the next one (carry-over), so no example is ever
  dropped or repeated within its epoch and no batch holds filler rows. A
  batch may therefore mix the end of one epoch with the start of the next.

  Batch k depends only on (examples, max_length, tokens_per_batch, seed,
  row_multiple), not on how the iterator got there: starting at
  `start_step=k` recomputes only the row counts of the earlier epochs (one
  shuffle and one packing pass each, no batches) to find where it begins.

  Each batch is a dict of `PACKED_KEYS` to int32 [rows_per_batch,
  max_length] arrays. `tokens_per_batch` counts slots on each side, as in
  the paper's "25000 source tokens and 25000 target tokens".

  With `host=(index, count)` (jax.process_index(), jax.process_count()),
  each process packs only its block of rows_per_batch / count rows of every
  batch (block `index`, as `sharding.host_rows` lays batches out) and
  yields them as `sharding.HostRows`: the blocks of all processes are the
  rows of the one-process batch, and a process reads only its examples'
  tokens (from a memory-mapped `token_cache`, only those pages).

  `examples` may also be the (source, target) `Side`s of the examples,
  e.g. a `token_cache`'s. With `recut(epoch, source, target)`, epoch e
  packs the Sides it returns instead: the same tokens cut into other
  examples (e.g. `text.ShiftedLMChunks`, so that a long text is not read
  in the same windows every epoch); it must be a function of its
  arguments, as resuming recomputes it.

  Attributes:
    rows_per_batch: max(1, tokens_per_batch // max_length), rounded down to
      a multiple of row_multiple (at least row_multiple), so that the batch
      splits evenly over data-parallel devices.
    examples_per_epoch: number of examples.
    rows_per_epoch: rows of epoch 0 (other epochs differ slightly).
    batches_per_epoch: rows_per_epoch / rows_per_batch, a float since the
      epochs do not align with batches.
    padding_fraction: fraction of the token slots of epoch 0 that are
      padding, source and target together.
    step: index of the batch that `next` returns.
  """

  def __init__(self, examples: Sequence[Example] | tuple[Side, Side], *,
               max_length: int, tokens_per_batch: int, seed: int,
               start_step: int = 0, row_multiple: int = 1,
               host: tuple[int, int] = (0, 1),
               recut: Callable[[int, Side, Side], tuple[Side, Side]]
               | None = None):
    if row_multiple < 1 or tokens_per_batch < 1:
      raise ValueError(f'tokens_per_batch={tokens_per_batch} and '
                       f'row_multiple={row_multiple} must be positive.')
    self._source, self._target = as_sides(examples, max_length)
    self._recut = recut
    if not len(self._source.lengths):
      raise ValueError('No training examples to batch: the training '
                       'split is empty. Check config.data (its source '
                       'and path; the lines above count what reading '
                       'dropped).')
    self.max_length = max_length
    self.seed = seed
    self.step = start_step
    self.rows_per_batch = rows_of_width(
        max_length, tokens_per_batch=tokens_per_batch,
        row_multiple=row_multiple)
    check_host(host, [self.rows_per_batch])
    self._host = host
    self.examples_per_epoch = len(self._source.lengths)

    self._plans = {}  # epoch -> (order, row starts, sides), epochs in use
    self._first_row = [0]  # epoch e: rows [_first_row[e], _first_row[e + 1])
    self._count_rows(0, 1)
    self.rows_per_epoch = self._first_row[1]
    self.batches_per_epoch = self.rows_per_epoch / self.rows_per_batch
    tokens = len(self._source.tokens) + len(self._target.tokens)
    self.padding_fraction = 1 - tokens / (
        2 * self.rows_per_epoch * max_length)

  def _make_plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray,
                                            tuple[Side, Side]]:
    """The shuffled example order of an epoch, the offsets of its rows, and
    the (source, target) sides it packs."""
    sides = (self._source, self._target)
    if self._recut is not None:
      sides = self._recut(epoch, *sides)
      check_lengths(*sides, self.max_length)
    count = len(sides[0].lengths)
    # Shuffling int32 ids in place draws the same permutation as
    # `permutation(n)` (int64) in half the memory.
    order = np.arange(count, dtype=np.int32 if count < 1 << 31 else np.int64)
    np.random.default_rng([self.seed, epoch]).shuffle(order)
    return order, _greedy_rows(sides[0].lengths, sides[1].lengths,
                               self.max_length, order), sides

  def _plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray,
                                       tuple[Side, Side]]:
    if epoch not in self._plans:
      self._plans[epoch] = self._make_plan(epoch)
    return self._plans[epoch]

  def _count_rows(self, begin: int, end: int) -> None:
    """Extends `_first_row` to cover global rows [begin, end)."""
    while self._first_row[-1] < end:
      epoch = len(self._first_row) - 1
      plan = self._make_plan(epoch)
      self._first_row.append(self._first_row[-1] + len(plan[1]) - 1)
      # Epochs before `begin` (on a resume) are needed for their row count
      # only; keeping just the plans in use bounds memory to a few epochs.
      if self._first_row[-1] > begin:
        self._plans[epoch] = plan
      del plan  # before the next epoch's plan is made

  def batch_at(self, step: int) -> dict[str, np.ndarray]:
    """Batch number `step` (what `next` returns at that step): this host's
    rows of it."""
    index, count = self._host
    share = self.rows_per_batch // count
    begin = step * self.rows_per_batch + index * share
    end = begin + share
    self._count_rows(begin, end)
    first_epoch = bisect.bisect_right(self._first_row, begin) - 1
    for stale in [e for e in self._plans if e < first_epoch]:
      del self._plans[stale]
    parts = []  # the rows of each epoch the batch spans, packed
    epoch = first_epoch
    while self._first_row[epoch] < end:
      order, starts, sides = self._plan(epoch)
      lo = max(begin, self._first_row[epoch]) - self._first_row[epoch]
      hi = min(end, self._first_row[epoch + 1]) - self._first_row[epoch]
      parts.append(_pack_rows(*sides, order[starts[lo]:starts[hi]],
                              starts[lo:hi + 1] - starts[lo],
                              self.max_length))
      epoch += 1
    batch = {k: np.concatenate([part[k] for part in parts])
             for k in parts[0]}
    return HostRows(batch, self.rows_per_batch) if count > 1 else batch

  def __next__(self) -> dict[str, np.ndarray]:
    batch = self.batch_at(self.step)
    self.step += 1
    return batch
