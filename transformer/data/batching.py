"""Batches of token ids, one example a row: length-bucketed training
batches, padded evaluation batches, and what every batcher shares (the
epoch permutation, filtering over-long examples, one side of the examples
in one flat array). Packed rows are in `packing`.

An example is a pair (source ids, target ids) of 1-D integer arrays, each
ending with EOS and free of 0, the padding id. Models that cannot restart
at segment boundaries (recurrent ones) train on `BucketedTrainBatches`:
one example a row, batches of similar lengths, only `inputs` and
`targets`. Evaluation and decoding use unpacked rows too
(`padded_batches`).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence

from absl import logging
import numpy as np

from transformer.sharding import HostRows

Example = tuple[np.ndarray, np.ndarray]  # ([S] source ids, [T] target ids)


def round_up(n: int, multiple: int) -> int:
  """The least multiple of `multiple` that is at least n."""
  return -(-n // multiple) * multiple


def rows_of_width(width: int, *, tokens_per_batch: int, row_multiple: int,
                  rows_per_batch: int = 0) -> int:
  """Rows of a token-counted batch of `width` tokens a row:
  tokens_per_batch // width (or `rows_per_batch` where set), rounded down
  to a multiple of `row_multiple` and at least `row_multiple`."""
  rows = rows_per_batch or tokens_per_batch // max(width, 1)
  return max(row_multiple, rows - rows % row_multiple)


def epoch_indices(count: int, *, batch_size: int, seed: int,
                  start_step: int = 0) -> Iterator[np.ndarray]:
  """Row indices of training batches drawn without replacement from a fresh
  permutation of `count` examples every epoch; batches run across epoch
  ends, so no example is ever dropped. Batch k is a function of (seed, k):
  iteration can start at any step."""
  # A batch no larger than the data spans at most two epochs.
  @functools.lru_cache(maxsize=2)
  def permutation(epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(count)

  step = start_step
  while True:
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    yield np.concatenate([
        permutation(epoch)[positions[positions // count == epoch] % count]
        for epoch in np.unique(positions // count)])
    step += 1


def truncate_keeping_eos(ids: Sequence[int], max_length: int):
  """`ids` cut to `max_length`, its last token (the EOS) kept."""
  if len(ids) <= max_length:
    return ids
  return np.concatenate([np.asarray(ids[:max_length - 1]),
                         np.asarray(ids[-1:])]).astype(np.asarray(ids).dtype)


TOO_LONG = ('drop', 'truncate')


def filter_long(examples: Sequence[Example], max_length: int,
                too_long: str = 'drop', *, report: bool = True
                ) -> tuple[list[Example], int]:
  """Drops, or truncates, the pairs whose source or target is longer than
  `max_length` (truncation keeps each side's last token, the EOS).

  Returns:
    The examples, in order, and how many were dropped or truncated (also
    logged by `report_long` unless `report` is False, for a caller that
    filters in parts and reports the total, so that data never changes
    unnoticed).
  """
  if too_long not in TOO_LONG:
    raise ValueError(f'config.data.too_long={too_long!r}; choose one of '
                     f'{TOO_LONG}.')
  fits = lambda ex: len(ex[0]) <= max_length and len(ex[1]) <= max_length
  if too_long == 'drop':
    kept = [ex for ex in examples if fits(ex)]
  else:
    kept = [ex if fits(ex) else (truncate_keeping_eos(ex[0], max_length),
                                 truncate_keeping_eos(ex[1], max_length))
            for ex in examples]
  changed = sum(not fits(ex) for ex in examples)
  if report:
    report_long(changed, len(examples), max_length, too_long)
  return kept, changed


def report_long(changed: int, total: int, max_length: int,
                too_long: str) -> None:
  """Warns that `changed` of `total` examples were dropped or truncated."""
  if changed:
    logging.warning(
        '%s %d of %d examples whose source or target is longer than '
        'max_length=%d tokens; raise max_length in the config to keep them '
        'whole.', 'Dropped' if too_long == 'drop' else 'Truncated', changed,
        total, max_length)


class Side:
  """One side (source or target) of the examples: all ids in one array
  (shared with `packing`).

  Gathering rows from one flat array is vectorised numpy; a list of millions
  of small arrays would cost a python loop per batch and more memory.
  """

  def __init__(self, sequences: Sequence[np.ndarray], name: str):
    self.lengths = np.fromiter(map(len, sequences), np.int64, len(sequences))
    self.starts = np.cumsum(self.lengths) - self.lengths
    # Empty sequences are left out: an empty list would make the result
    # float, which must stay an error for genuinely non-integer ids.
    tokens = np.concatenate(
        [s for s, n in zip(sequences, self.lengths.tolist()) if n]
        or [np.zeros(0, np.int32)])
    if tokens.ndim != 1 or tokens.dtype.kind not in 'iu':
      raise ValueError(f'Each {name} must be a 1-D sequence of integer ids, '
                       f'not {tokens.dtype} of rank {tokens.ndim}.')
    self.tokens = tokens.astype(np.int32, copy=False)
    if (self.tokens == 0).any():
      where = np.flatnonzero(self.tokens == 0)[0]
      index = np.searchsorted(self.starts, where, side='right') - 1
      raise ValueError(f'The {name} of example {index} contains id 0, which '
                       'is reserved for padding.')

  @classmethod
  def from_arrays(cls, tokens: np.ndarray, lengths: np.ndarray) -> 'Side':
    """A side from its concatenated ids (e.g. memory-mapped, of any integer
    dtype; read only where batches need them) and example lengths, as
    `token_cache` stores them (checked when the cache was written)."""
    side = cls.__new__(cls)
    # Millions of short examples: these two per-example arrays are most of
    # the pipeline's own memory, so each takes the narrowest signed dtype
    # that holds it (int16 lengths while far below its limit, so that
    # rounding them up cannot overflow; int32 offsets below 2**31 tokens).
    lengths = np.asarray(lengths)
    total = int(lengths.sum(dtype=np.int64))
    longest = int(lengths.max(initial=0))
    side.tokens = tokens
    side.lengths = lengths.astype(np.int16 if longest < 1 << 14 else np.int32,
                                  copy=False)
    side.starts = np.cumsum(
        side.lengths, dtype=np.int32 if total < 1 << 31 else np.int64)
    side.starts -= side.lengths
    return side

  def gather(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """Tokens of examples `ids`, concatenated, with their layout.

    Returns:
      tokens [K], position of each token within its example [K], lengths of
      the examples [len(ids)] and the offset of each example in tokens.
    """
    lengths = self.lengths[ids]
    begins = np.cumsum(lengths) - lengths
    within = np.arange(lengths.sum()) - np.repeat(begins, lengths)
    tokens = self.tokens[np.repeat(self.starts[ids], lengths) + within]
    return tokens, within, lengths, begins


def sides(examples: Sequence[Example], max_length: int
          ) -> tuple[Side, Side]:
  """The source and target sides of the examples, each checked to be
  non-empty and at most `max_length` long."""
  source = Side([ex[0] for ex in examples], 'source')
  target = Side([ex[1] for ex in examples], 'target')
  check_lengths(source, target, max_length)
  return source, target


def as_sides(examples: Sequence[Example] | tuple[Side, Side],
             max_length: int) -> tuple[Side, Side]:
  """The (source, target) sides of examples given as pairs or already as
  two `Side`s (e.g. a `token_cache`'s), checked by `check_lengths`."""
  if len(examples) == 2 and all(isinstance(x, Side) for x in examples):
    check_lengths(*examples, max_length)
    return tuple(examples)
  return sides(examples, max_length)


def check_host(host: tuple[int, int], rows: Sequence[int]) -> None:
  """Refuses a (process index, process count) that cannot take an equal
  block of every batch size in `rows`."""
  index, count = host
  if not 0 <= index < count or any(r % count for r in rows):
    raise ValueError(
        f'Host {index} of {count} cannot take an equal share of batches of '
        f'{sorted(set(rows))} rows: make the rows per batch (set by '
        f'tokens_per_batch and row_multiple) a multiple of the number of '
        f'processes.')


def check_lengths(source: Side, target: Side, max_length: int) -> None:
  """Refuses empty sides and sides longer than `max_length`."""
  for side, name in ((source, 'source'), (target, 'target')):
    if len(side.lengths) and side.lengths.min() < 1:
      raise ValueError(f'Example {np.argmin(side.lengths)} has an empty '
                       f'{name}; each side must end with EOS.')
    if len(side.lengths) and side.lengths.max() > max_length:
      raise ValueError(
          f'Example {np.argmax(side.lengths)} has a {name} of '
          f'{side.lengths.max()} tokens, longer than max_length={max_length};'
          ' drop such examples with `filter_long` first.')


def _rows(side: Side, ids: np.ndarray, num_rows: int,
          width: int) -> np.ndarray:
  """[num_rows, width] ids: row i holds example ids[i], then zeros; the rows
  past len(ids) are all zeros."""
  tokens, within, lengths, _ = side.gather(ids)
  out = np.zeros((num_rows, width), np.int32)
  out[np.repeat(np.arange(len(ids)), lengths), within] = tokens
  return out


# Bucketing sorts pools of about this many batches' worth of examples: larger
# pools pad less, smaller ones keep more randomness in what meets in a batch.
_POOL_BATCHES = 50


class BucketedTrainBatches(Iterator[dict[str, np.ndarray]]):
  """Endless, deterministic, resumable training batches of one example a row.

  For models that cannot cheaply restart at packed-segment boundaries
  (recurrent ones): a drop-in alternative to `PackedTrainBatches`, with the
  same constructor (plus `length_multiple`) and the same guarantees: each
  example once an epoch, deterministic, resumable. Each batch holds

    inputs   [R, W]  a row per example: its source ids, then zeros
    targets  [R, W]  the same example's target ids, then zeros

  and no segmentation or position keys, so a model sees single examples.
  W is the batch's longest source or target rounded up to `length_multiple`
  and capped at `max_length`, one width for both sides. R =
  tokens_per_batch // W (or `rows_per_batch`, whatever the width: a batch
  of so many examples, as fine-tuning recipes count them) rounded down to
  a multiple of `row_multiple` (at least row_multiple), so a batch has about tokens_per_batch slots a side
  whatever its lengths, as in the paper's token-count batching: between
  tokens_per_batch / 2 and tokens_per_batch when tokens_per_batch >=
  row_multiple * max_length. R depends on W alone, so there are at most
  ceil(max_length / length_multiple) batch shapes, each one XLA
  compilation; `batch_shapes` lists those these examples can produce.

  Epoch e shuffles the examples with a generator seeded by (seed, e),
  sorts each pool of about `_POOL_BATCHES` (50) batches' worth of consecutive
  examples by width, longest first, and cuts it into batches: a batch's
  first example sets W, hence R, and the next R - 1 examples are no wider.
  The examples at the end of a pool too few to fill a batch join the next
  pool. Finally the same generator shuffles the order of the epoch's
  batches; otherwise every pool would run from long to short batches.

  End of an epoch: the examples left after the last pool form a final,
  part-filled batch, of the usual shape [R, W] for its width, its missing
  rows all zeros (zero loss weight). Thus epochs never share a batch and
  batch k is found from its own epoch's plan alone; the cost is at most one
  part-filled batch per epoch (counted in `padding_fraction`), and it lands
  anywhere in the epoch, not at its end.

  Batch k depends only on (examples, max_length, tokens_per_batch, seed,
  row_multiple, length_multiple), not on how the iterator got there:
  starting at `start_step=k` plans the earlier epochs (a shuffle and a sort
  each, no batches) only to count their batches.

  `examples` may also be the (source, target) `Side`s of the examples (a
  `token_cache`'s). With `host=(index, count)` each process builds only its
  block of R / count rows of every batch (block `index`), yielded as
  `sharding.HostRows`, as `PackedTrainBatches` does; every R must then be a
  multiple of count (a row_multiple of data-parallel devices is).

  Attributes:
    batch_shapes: the (R, W) shapes that batches can have, by width.
    examples_per_epoch: number of examples.
    batches_per_epoch: batches of epoch 0 (other epochs may differ slightly,
      as the cuts depend on the shuffle).
    padding_fraction: fraction of the token slots of epoch 0 that are
      padding, source and target together, filler rows included.
    step: index of the batch that `next` returns.
  """

  def __init__(self, examples: Sequence[Example] | tuple[Side, Side], *,
               max_length: int, tokens_per_batch: int, seed: int,
               start_step: int = 0, row_multiple: int = 1,
               length_multiple: int = 8, host: tuple[int, int] = (0, 1),
               rows_per_batch: int = 0):
    if min(row_multiple, tokens_per_batch, length_multiple) < 1 or (
        rows_per_batch < 0):
      raise ValueError(f'tokens_per_batch={tokens_per_batch}, row_multiple='
                       f'{row_multiple} and length_multiple={length_multiple}'
                       ' must be positive.')
    self._source, self._target = as_sides(examples, max_length)
    if not len(self._source.lengths):
      raise ValueError('No training examples to batch: the training '
                       'split is empty. Check config.data (its source '
                       'and path; the lines above count what reading '
                       'dropped).')
    self.max_length = max_length
    self.seed = seed
    self.step = start_step
    self.examples_per_epoch = len(self._source.lengths)

    # The width of the batch each example would set: [N].
    self._widths = np.minimum(
        round_up(np.maximum(self._source.lengths, self._target.lengths),
                  length_multiple), max_length)
    # Rows of a batch of each width 0 ... max_length.
    self._rows_of_width = np.asarray([
        rows_of_width(width, tokens_per_batch=tokens_per_batch,
                      row_multiple=row_multiple,
                      rows_per_batch=rows_per_batch)
        for width in range(max_length + 1)])
    self.batch_shapes = [(int(self._rows_of_width[w]), int(w))
                         for w in np.unique(self._widths)]
    check_host(host, [rows for rows, _ in self.batch_shapes])
    self._host = host
    # An example fills 1 / R of a batch of its width.
    self._pool_size = max(1, round(
        _POOL_BATCHES * self.examples_per_epoch
        / (1 / self._rows_of_width[self._widths]).sum()))

    self._first_batch = [0]  # epoch e: batches [_first_batch[e], ...[e + 1])
    self._cache = None  # (epoch, plan) of the epoch last served
    self._epoch_of(0)
    ids, starts, _ = self._cache[1]
    self.batches_per_epoch = len(starts) - 1
    widths = self._widths[ids[starts[:-1]]]
    tokens = len(self._source.tokens) + len(self._target.tokens)
    self.padding_fraction = 1 - tokens / (
        2 * int((self._rows_of_width[widths] * widths).sum()))

  def _make_plan(self, epoch: int) -> tuple[np.ndarray, ...]:
    """How epoch `epoch` cuts the examples into batches.

    Returns:
      ids [N], every example once, batch after batch, each batch longest
      first; starts [B + 1], batch b holds ids[starts[b]:starts[b + 1]];
      order [B], the batches in the order they are served.
    """
    rng = np.random.default_rng([self.seed, epoch])
    shuffled = rng.permutation(self.examples_per_epoch)
    pieces, sizes = [], []
    left = shuffled[:0]
    for begin in range(0, len(shuffled), self._pool_size):
      pool = np.concatenate([left, shuffled[begin:begin + self._pool_size]])
      # Longest first: then a batch's first example sets its width and rows.
      pool = pool[np.argsort(-self._widths[pool], kind='stable')]
      rows = self._rows_of_width[self._widths[pool]].tolist()
      end = 0
      while end < len(pool) and end + rows[end] <= len(pool):
        sizes.append(rows[end])
        end += rows[end]
      pieces.append(pool[:end])
      left = pool[end:]
    if len(left):  # the final, part-filled batch
      pieces.append(left)
      sizes.append(len(left))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return np.concatenate(pieces), starts, rng.permutation(len(sizes))

  def _epoch_of(self, step: int) -> int:
    """The epoch of batch `step`, planning epochs as far as needed."""
    while self._first_batch[-1] <= step:
      epoch = len(self._first_batch) - 1
      plan = self._make_plan(epoch)
      self._first_batch.append(self._first_batch[-1] + len(plan[2]))
      # Only the last epoch planned can hold `step`: one plan in memory.
      self._cache = (epoch, plan)
    return bisect.bisect_right(self._first_batch, step) - 1

  def batch_at(self, step: int) -> dict[str, np.ndarray]:
    """Batch number `step` (what `next` returns at that step)."""
    epoch = self._epoch_of(step)
    if self._cache[0] != epoch:  # random access to an earlier epoch
      self._cache = (epoch, self._make_plan(epoch))
    ids, starts, order = self._cache[1]
    b = order[step - self._first_batch[epoch]]
    ids = ids[starts[b]:starts[b + 1]]
    width = int(self._widths[ids[0]])
    rows = int(self._rows_of_width[width])
    index, count = self._host
    share = rows // count  # this host's block of rows (all of them for one)
    ids = ids[index * share:(index + 1) * share]
    batch = {'inputs': _rows(self._source, ids, share, width),
             'targets': _rows(self._target, ids, share, width)}
    return HostRows(batch, rows) if count > 1 else batch

  def __next__(self) -> dict[str, np.ndarray]:
    batch = self.batch_at(self.step)
    self.step += 1
    return batch


def _padded(side: Side, ids: np.ndarray, num_rows: int,
            length_multiple: int, max_width: int | None) -> np.ndarray:
  """[num_rows, W] ids of examples `ids`, zero-padded; W a length multiple
  (or `max_width` when rounding up would pass it)."""
  longest = max(1, int(side.lengths[ids].max(initial=0)))
  width = round_up(longest, length_multiple)
  if max_width is not None:
    if longest > max_width:
      raise ValueError(f'An example of {longest} tokens does not fit '
                       f'max_width={max_width}; filter or truncate it.')
    width = min(width, max_width)
  return _rows(side, ids, num_rows, width)


def padded_batches(examples: Sequence[Example], *, batch_size: int,
                   length_multiple: int = 8, row_multiple: int = 1,
                   max_width: int | None = None
                   ) -> list[dict[str, np.ndarray]]:
  """Unpacked, zero-padded batches for evaluation and decoding.

  Examples are sorted by source length (then target length) and cut into
  batches of `batch_size`, so that a batch holds similar lengths and little
  padding. The longest batches come first so that running out of memory
  shows at once. Widths are rounded up to `length_multiple` to bound the
  number of shapes, hence of compilations.

  Args:
    examples: pairs of ids; either side may be empty (e.g. targets when
      only decoding).
    batch_size: examples per batch (the last batch may hold fewer).
    length_multiple: widths are multiples of this.
    row_multiple: rows are padded with all-zero rows to a multiple of this
      (the number of data-parallel devices).
    max_width: widths never exceed this (e.g. the model's max_length).

  Returns:
    Dicts with `inputs` int32 [B, S], `targets` int32 [B, T] and `index`
    int32 [B]: the position of each row's example in `examples`, -1 for
    filler rows. Every example is in exactly one batch.
  """
  source = Side([ex[0] for ex in examples], 'source')
  target = Side([ex[1] for ex in examples], 'target')
  order = np.lexsort((target.lengths, source.lengths))[::-1]
  batches = []
  for begin in range(0, len(order), batch_size):
    ids = order[begin:begin + batch_size]
    num_rows = round_up(len(ids), row_multiple)
    index = np.full(num_rows, -1, np.int32)
    index[:len(ids)] = ids
    batches.append({
        'inputs': _padded(source, ids, num_rows, length_multiple, max_width),
        'targets': _padded(target, ids, num_rows, length_multiple,
                           max_width),
        'index': index,
    })
  return batches
