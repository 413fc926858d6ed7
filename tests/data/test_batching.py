"""Packing, packed training batches and padded evaluation batches."""

import collections
import logging

import numpy as np
import pytest

from conftest import raises_naming
from transformer.data import batching
from transformer.data import packing
from transformer.data import text

EOS = 1


def random_examples(n, seed=0, max_len=30, correlated=True, min_len=2):
  """Examples whose first source token is 3 + its index, ids in [3, 10^4)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    src_len = int(rng.integers(min_len, max_len + 1))
    tgt_len = (np.clip(src_len + rng.integers(-3, 4), min_len, max_len)
               if correlated else rng.integers(min_len, max_len + 1))
    src = np.concatenate([[3 + i], rng.integers(3, 10_000, src_len - 2), [EOS]])
    tgt = np.concatenate([rng.integers(3, 10_000, tgt_len - 1), [EOS]])
    out.append((src.astype(np.int32), tgt.astype(np.int32)))
  return out


def unpack(batch):
  """Rows of a packed batch -> examples, in order, checking the layout."""
  examples = []
  for row in range(batch['inputs'].shape[0]):
    sides = []
    for prefix in ('inputs', 'targets'):
      tokens = batch[prefix][row]
      segments = batch[f'{prefix}_segmentation'][row]
      positions = batch[f'{prefix}_position'][row]
      used = segments > 0
      # Segments 1, 2, ... left to right, padding only at the end.
      assert (np.diff(segments[used]) >= 0).all()
      assert not used[np.argmin(used):].any() or used.all()
      assert (tokens[~used] == 0).all() and (positions[~used] == 0).all()
      assert (tokens[used] != 0).all()
      ids = np.unique(segments[used])
      np.testing.assert_array_equal(ids, np.arange(1, len(ids) + 1))
      parts = []
      for s in ids:
        np.testing.assert_array_equal(positions[segments == s],
                                      np.arange((segments == s).sum()))
        parts.append(tokens[segments == s])
      sides.append(parts)
    # The same examples on both sides: segment ids agree.
    assert len(sides[0]) == len(sides[1])
    examples.extend(zip(*sides))
  return examples


def key(example):
  return tuple(example[0]), tuple(example[1])


def assert_same_examples(got, want):
  assert [key(e) for e in got] == [key(e) for e in want]


# ----------------------------------------------------------------------------
# filter_long and pack
# ----------------------------------------------------------------------------


def test_filter_long_counts_and_warns(caplog):
  examples = random_examples(200, max_len=40)
  too_long = sum(max(len(s), len(t)) > 25 for s, t in examples)
  assert 0 < too_long < 200
  with caplog.at_level(logging.WARNING):
    kept, dropped = batching.filter_long(examples, 25)
  assert dropped == too_long and len(kept) == 200 - too_long
  assert_same_examples(kept, [e for e in examples
                              if max(len(e[0]), len(e[1])) <= 25])
  assert f'Dropped {too_long} of 200' in caplog.text
  assert 'max_length=25' in caplog.text
  assert batching.filter_long(kept, 25)[1] == 0


def test_pack_keeps_every_token_once_in_order():
  examples = random_examples(500)
  packed = packing.pack(examples, 64)
  assert set(packed) == set(packing.PACKED_KEYS)
  for array in packed.values():
    assert array.dtype == np.int32 and array.shape == packed['inputs'].shape
  assert_same_examples(unpack(packed), examples)
  # The source and target sides of a row hold the same examples.
  np.testing.assert_array_equal(packed['inputs_segmentation'].max(1),
                                packed['targets_segmentation'].max(1))


def test_pack_is_greedy_on_both_sides():
  examples = random_examples(300, correlated=False)
  packed = packing.pack(examples, 48)
  lengths = {p: (packed[f'{p}_segmentation'] > 0).sum(1)
             for p in ('inputs', 'targets')}
  assert max(lengths['inputs'].max(), lengths['targets'].max()) <= 48
  # A row ends only when the next example would overflow one of its sides.
  rows = [unpack({k: v[r:r + 1] for k, v in packed.items()})
          for r in range(len(packed['inputs']))]
  for r in range(len(rows) - 1):
    src, tgt = rows[r + 1][0]
    assert (lengths['inputs'][r] + len(src) > 48
            or lengths['targets'][r] + len(tgt) > 48)


def next_fit_rows(source_lengths, target_lengths, max_length):
  """Next-fit packing written the plain way, example by example."""
  starts, used = [0], [0, 0]
  for i, lengths in enumerate(zip(source_lengths, target_lengths)):
    if any(u + n > max_length for u, n in zip(used, lengths)):
      starts.append(i)
      used = [0, 0]
    used = [u + n for u, n in zip(used, lengths)]
  return starts + [len(source_lengths)]


@pytest.mark.parametrize('window', [1, 7, 64, 1 << 18])
def test_rows_planned_in_windows_are_next_fit(window):
  # The plan of an epoch is made a window of examples at a time (its memory
  # bounded whatever the corpus): rows must not depend on the window.
  rng = np.random.default_rng(window)
  source, target = rng.integers(1, 17, (2, 3000))
  order = rng.permutation(3000).astype(np.int32)
  expected = next_fit_rows(source[order], target[order], 16)
  np.testing.assert_array_equal(
      packing._greedy_rows(source, target, 16, order, window=window),
      expected)
  np.testing.assert_array_equal(
      packing._greedy_rows(source[order], target[order], 16, window=window),
      expected)


def test_cached_sides_keep_narrow_per_example_arrays():
  side = batching.Side.from_arrays(np.ones(12, np.uint16),
                                   np.array([5, 4, 3], np.int32))
  assert side.lengths.dtype == np.int16 and side.starts.dtype == np.int32
  np.testing.assert_array_equal(side.starts, [0, 5, 9])
  # Past 2**31 tokens the offsets widen (the token array is not read here).
  wide = batching.Side.from_arrays(np.ones(0, np.uint16),
                                   np.array([1 << 30, 1 << 30, 5], np.int64))
  assert wide.lengths.dtype == np.int32 and wide.starts.dtype == np.int64
  np.testing.assert_array_equal(wide.starts, [0, 1 << 30, 1 << 31])


def test_pack_hand_example():
  examples = [([5, 6, EOS], [7, EOS]), ([8, EOS], [9, 9, 9, EOS]),
              ([4, 4, 4, EOS], [3, EOS])]
  packed = packing.pack(examples, 6)
  np.testing.assert_array_equal(packed['inputs'], [[5, 6, 1, 8, 1, 0],
                                                   [4, 4, 4, 1, 0, 0]])
  np.testing.assert_array_equal(packed['targets'], [[7, 1, 9, 9, 9, 1],
                                                    [3, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(packed['inputs_segmentation'],
                                [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
  np.testing.assert_array_equal(packed['targets_position'],
                                [[0, 1, 0, 1, 2, 3], [0, 1, 0, 0, 0, 0]])


def test_pack_rejects_bad_examples():
  with raises_naming(ValueError, 'source of 10 tokens', 'max_length=8',
                     'filter_long'):
    packing.pack([([3] * 9 + [EOS], [EOS])], 8)
  with raises_naming(ValueError, 'Example 0', 'empty target', 'EOS'):
    packing.pack([([3, EOS], [])], 8)
  with raises_naming(ValueError, 'example 1', 'id 0', 'padding'):
    packing.pack([([3, EOS], [4, EOS]), ([3, 0, EOS], [EOS])], 8)
  with raises_naming(ValueError, 'integer ids', 'float64'):
    packing.pack([([3.5, EOS], [4, EOS])], 8)


# ----------------------------------------------------------------------------
# PackedTrainBatches
# ----------------------------------------------------------------------------


@pytest.mark.parametrize('tokens_per_batch, row_multiple, rows', [
    (1000, 1, 15),  # 1000 // 64
    (1000, 4, 12),  # rounded down to a multiple of 4
    (1000, 8, 8),
    (1000, 16, 16),  # at least one row per device
    (10, 1, 1),  # at least one row
    (10, 4, 4),
])
def test_rows_per_batch(tokens_per_batch, row_multiple, rows):
  batches = packing.PackedTrainBatches(
      random_examples(50), max_length=64, tokens_per_batch=tokens_per_batch,
      seed=0, row_multiple=row_multiple)
  assert batches.rows_per_batch == rows
  batch = next(batches)
  assert set(batch) == set(packing.PACKED_KEYS)
  for array in batch.values():
    assert array.shape == (rows, 64) and array.dtype == np.int32


def first_batches(n, **kwargs):
  batches = packing.PackedTrainBatches(**kwargs)
  return [next(batches) for _ in range(n)]


def assert_same_batches(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    for k in packing.PACKED_KEYS:
      np.testing.assert_array_equal(x[k], y[k])


def test_deterministic_per_seed():
  args = dict(examples=random_examples(300), max_length=64,
              tokens_per_batch=512)
  reference = first_batches(5, seed=0, **args)
  assert_same_batches(reference, first_batches(5, seed=0, **args))
  other = first_batches(5, seed=1, **args)
  assert not np.array_equal(reference[0]['inputs'], other[0]['inputs'])


def example_stream(batches):
  """Example ids (first source token - 3) in the order the rows hold them."""
  return [int(src[0]) - 3 for b in batches for src, _ in unpack(b)]


@pytest.mark.parametrize('num_examples, tokens_per_batch', [
    (200, 640),  # several batches per epoch, leftover rows carried over
    (7, 1024),  # an epoch smaller than a batch: a batch spans epochs
])
def test_every_example_once_per_epoch(num_examples, tokens_per_batch):
  examples = random_examples(num_examples)
  batches = packing.PackedTrainBatches(
      examples, max_length=64, tokens_per_batch=tokens_per_batch, seed=3)
  stream = [next(batches) for _ in range(int(4 * batches.batches_per_epoch)
                                         + 2)]
  ids = example_stream(stream)
  epochs = [ids[i:i + num_examples]
            for i in range(0, len(ids) - num_examples + 1, num_examples)]
  assert len(epochs) >= 3
  for epoch in epochs:
    assert sorted(epoch) == list(range(num_examples))
  assert epochs[0] != epochs[1]  # each epoch reshuffled
  # Rows never mix epochs: epoch 0 ends exactly at row rows_per_epoch.
  rows = [unpack({k: v[r:r + 1] for k, v in b.items()})
          for b in stream for r in range(batches.rows_per_batch)]
  assert sum(len(r) for r in rows[:batches.rows_per_epoch]) == num_examples
  # Content survives too, not just ids.
  assert_same_examples(unpack(stream[0])[:1], [examples[ids[0]]])


def test_resume_equals_advancing():
  args = dict(examples=random_examples(150), max_length=64,
              tokens_per_batch=512, seed=5)
  batches = packing.PackedTrainBatches(**args)
  steps = int(3 * batches.batches_per_epoch) + 2  # crosses two epoch ends
  reference = [next(batches) for _ in range(steps)]
  assert batches.step == steps
  for start in (1, int(batches.batches_per_epoch),
                int(batches.batches_per_epoch) + 1, steps - 3):
    resumed = packing.PackedTrainBatches(start_step=start, **args)
    assert_same_batches([next(resumed) for _ in range(steps - start)],
                        reference[start:])
  # Random access agrees as well, backwards included.
  assert_same_batches([batches.batch_at(2), batches.batch_at(0)],
                      [reference[2], reference[0]])


def test_recut_epochs_pack_their_own_examples_and_resume():
  # One long document of distinct ids (3, 4, ...), cut elsewhere each epoch.
  max_length = 16
  stream = np.arange(3, 3 + 400)
  source, target = batching.sides(
      text.lm_examples([stream.tolist()], max_length), max_length)
  recut = text.ShiftedLMChunks(source, max_length, seed=7)
  args = dict(examples=(source, target), max_length=max_length,
              tokens_per_batch=4 * max_length, seed=3, recut=recut)
  batches = packing.PackedTrainBatches(**args)
  steps = int(3 * batches.batches_per_epoch) + 2
  reference = [next(batches) for _ in range(steps)]
  rows = [unpack({k: v[r:r + 1] for k, v in b.items()})
          for b in reference for r in range(batches.rows_per_batch)]
  first_rows = [batches._first_row[e] for e in range(4)]
  chunks = [[source.tolist() for row in rows[first_rows[e]:first_rows[e + 1]]
             for source, _ in row] for e in range(3)]
  for epoch in chunks:  # every input predicted once an epoch
    assert sorted(t for chunk in epoch for t in chunk) == sorted(
        [EOS] + stream.tolist())
  # The windows differ from epoch to epoch (not just their order).
  assert sorted(map(tuple, chunks[0])) != sorted(map(tuple, chunks[1]))
  for start in (1, int(batches.batches_per_epoch) + 1, steps - 2):
    resumed = packing.PackedTrainBatches(start_step=start, **args)
    assert_same_batches([next(resumed) for _ in range(steps - start)],
                        reference[start:])


@pytest.mark.parametrize('n, lengths, max_length, rows, padding', [
    (4, (3, 2), 5, 4, 0.5),  # one example per row: 20 of 40 slots used
    (5, (2, 1), 4, 3, 0.375),  # two per row, one alone: 15 of 24 slots used
])
def test_padding_fraction_by_hand(n, lengths, max_length, rows, padding):
  # All examples alike, so every shuffle packs into the same rows.
  examples = [([3 + i] * (lengths[0] - 1) + [EOS],
               [4] * (lengths[1] - 1) + [EOS]) for i in range(n)]
  batches = packing.PackedTrainBatches(
      examples, max_length=max_length, tokens_per_batch=max_length, seed=0)
  assert batches.rows_per_epoch == rows
  assert batches.examples_per_epoch == n
  assert batches.batches_per_epoch == rows
  assert batches.padding_fraction == pytest.approx(padding)


def test_padding_fraction_matches_batches_and_is_low():
  batches = packing.PackedTrainBatches(
      random_examples(2000, max_len=40), max_length=128,
      tokens_per_batch=128, seed=0)
  epoch = [next(batches) for _ in range(batches.rows_per_epoch)]
  slots = sum(b['inputs'].size + b['targets'].size for b in epoch)
  zeros = sum((b['inputs'] == 0).sum() + (b['targets'] == 0).sum()
              for b in epoch)
  assert batches.padding_fraction == pytest.approx(zeros / slots)
  assert batches.padding_fraction < 0.2


# ----------------------------------------------------------------------------
# BucketedTrainBatches
# ----------------------------------------------------------------------------


def bucketed(examples, **kwargs):
  args = dict(max_length=64, tokens_per_batch=512, seed=0)
  return batching.BucketedTrainBatches(examples, **{**args, **kwargs})


def unbucket(batch, examples):
  """Indices of the examples in a batch's rows, -1 for a filler row.

  Checks that a row holds exactly one whole example on both sides (the same
  one), then zeros, and that filler rows (all zeros) come last.
  """
  assert set(batch) == {'inputs', 'targets'}
  for array in batch.values():
    assert array.dtype == np.int32 and array.shape == batch['inputs'].shape
  index = []
  for src, tgt in zip(batch['inputs'], batch['targets']):
    if not src.any() and not tgt.any():
      index.append(-1)
      continue
    assert not index or index[-1] >= 0  # no example after a filler row
    i = int(src[0]) - 3
    for row, want in zip((src, tgt), examples[i]):
      np.testing.assert_array_equal(row[:len(want)], want)
      assert not row[len(want):].any()
    index.append(i)
  return index


def epochs_of(batches, examples, num_epochs):
  """The first epochs, checking that no batch spans two.

  Returns:
    Per epoch, per batch served, `unbucket` of the batch.
  """
  epochs = [[]]
  # Each batch serves at least one example, so this many batches suffice.
  for _ in range(num_epochs * len(examples)):
    if len(epochs) > num_epochs:
      break
    epochs[-1].append(unbucket(next(batches), examples))
    served = sum(i >= 0 for index in epochs[-1] for i in index)
    assert served <= len(examples)  # else the epoch ended mid-batch
    if served == len(examples):
      epochs.append([])
  assert len(epochs) > num_epochs, 'examples repeated within an epoch'
  return epochs[:-1]


@pytest.mark.parametrize('num_examples, tokens_per_batch', [
    (300, 512),  # many batches per epoch
    (600, 128),  # several pools: their ends carry over, no filler rows
    (7, 1024),  # an epoch smaller than a batch: one part-filled batch each
])
def test_bucketed_every_example_once_per_epoch(num_examples,
                                               tokens_per_batch):
  examples = random_examples(num_examples)
  batches = bucketed(examples, tokens_per_batch=tokens_per_batch, seed=3)
  epochs = epochs_of(batches, examples, 3)
  order = [[i for index in epoch for i in index if i >= 0]
           for epoch in epochs]
  for ids in order:
    assert sorted(ids) == list(range(num_examples))
  assert order[0] != order[1]  # each epoch reshuffled
  assert len(epochs[0]) == batches.batches_per_epoch
  # Filler rows only in the epoch's part-filled batch, if any.
  for epoch in epochs:
    assert sum(-1 in index for index in epoch) <= 1


def test_bucketed_rows_are_single_examples():
  # Unrelated source and target lengths: the common width follows the
  # longer side, whichever it is.
  examples = random_examples(200, max_len=50, correlated=False)
  batches = bucketed(examples, length_multiple=4)
  seen = 0
  for _ in range(batches.batches_per_epoch):
    batch = next(batches)
    index = [i for i in unbucket(batch, examples) if i >= 0]
    longest = max(max(len(s), len(t)) for s, t in (examples[i]
                                                   for i in index))
    assert batch['inputs'].shape[1] == -(-longest // 4) * 4
    seen += len(index)
  assert seen == len(examples)


@pytest.mark.parametrize('tokens_per_batch, row_multiple', [
    (512, 1), (1000, 4), (1000, 8), (10, 1), (10, 4)])
def test_bucketed_rows_per_batch(tokens_per_batch, row_multiple):
  examples = random_examples(300, max_len=60)
  batches = bucketed(examples, tokens_per_batch=tokens_per_batch,
                     row_multiple=row_multiple)
  part_filled = 0
  for _ in range(batches.batches_per_epoch):
    batch = next(batches)
    rows, width = batch['inputs'].shape
    fit = tokens_per_batch // width
    assert rows == max(row_multiple, fit - fit % row_multiple)
    assert rows % row_multiple == 0
    # Filler rows (all zeros, checked by unbucket) only in the part-filled
    # batch, which still holds at least one example.
    filler = unbucket(batch, examples).count(-1)
    assert filler < rows
    part_filled += filler > 0
  assert part_filled <= 1


def test_bucketed_filler_rows_by_hand():
  # 30 alike examples of width 8: 100 // 8 = 12 rows, 8 with row_multiple
  # 8, so three full batches and one of 6 examples and 2 filler rows.
  examples = [([3 + i] * 4 + [EOS], [4, 4, EOS]) for i in range(30)]
  batches = bucketed(examples, tokens_per_batch=100, row_multiple=8)
  assert batches.batch_shapes == [(8, 8)]
  assert batches.batches_per_epoch == 4
  epoch = [unbucket(next(batches), examples) for _ in range(4)]
  assert sorted(index.count(-1) for index in epoch) == [0, 0, 0, 2]
  assert batches.padding_fraction == pytest.approx(1 - 30 * 8 / (2 * 256))
  # The next epoch starts afresh rather than filling those two rows.
  assert sorted(i for _ in range(4) for i in unbucket(next(batches), examples)
                if i >= 0) == list(range(30))


def test_bucketed_widths_and_number_of_shapes():
  # max_length 60 is not a multiple of 8: the longest batches are capped.
  examples = random_examples(600, max_len=60)
  batches = bucketed(examples, max_length=60, tokens_per_batch=600)
  shapes = collections.Counter()
  for _ in range(batches.batches_per_epoch):
    batch = next(batches)
    shapes[batch['inputs'].shape] += 1
    assert batch['targets'].shape == batch['inputs'].shape
  widths = {w for _, w in shapes}
  assert widths <= {8, 16, 24, 32, 40, 48, 56, 60} and 60 in widths
  assert set(shapes) <= set(batches.batch_shapes)
  assert len(batches.batch_shapes) <= -(-60 // 8)
  assert len(widths) == len(shapes)  # rows follow from the width


def test_bucketed_deterministic_per_seed():
  examples = random_examples(300)
  take = lambda b: [next(b) for _ in range(5)]
  reference = take(bucketed(examples, seed=0))
  again = take(bucketed(examples, seed=0))
  other = take(bucketed(examples, seed=1))
  for x, y in zip(reference, again):
    for k in ('inputs', 'targets'):
      np.testing.assert_array_equal(x[k], y[k])
  assert any(x['inputs'].shape != y['inputs'].shape
             or not np.array_equal(x['inputs'], y['inputs'])
             for x, y in zip(reference, other))


def test_bucketed_resume_equals_advancing():
  # Three pools an epoch, and with this seed epoch 1 has one batch more than
  # epochs 0 and 2 (cuts depend on the shuffle): resuming must count them.
  examples = random_examples(600)
  args = dict(tokens_per_batch=128, seed=1)
  sizes = [len(epoch) for epoch in epochs_of(bucketed(examples, **args),
                                               examples, 3)]
  assert sizes[0] == sizes[2] == sizes[1] - 1
  batches = bucketed(examples, **args)
  steps = sum(sizes[:2]) + 3  # crosses two epoch ends
  reference = [next(batches) for _ in range(steps)]
  assert batches.step == steps

  def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
      assert set(x) == set(y)
      for k in x:
        np.testing.assert_array_equal(x[k], y[k])

  for start in (1, sizes[0] - 1, sizes[0], sizes[0] + 1, sum(sizes[:2]) - 1,
                sum(sizes[:2]), steps - 1):
    resumed = bucketed(examples, start_step=start, **args)
    assert_same([next(resumed) for _ in range(steps - start)],
                reference[start:])
  # Random access agrees as well, backwards included.
  assert_same([batches.batch_at(sizes[0] + 1), batches.batch_at(0)],
              [reference[sizes[0] + 1], reference[0]])


def test_bucketed_padding_fraction_matches_batches_and_is_low():
  examples = random_examples(3000, max_len=40, min_len=3)
  batches = bucketed(examples, tokens_per_batch=1024)
  epoch = [next(batches) for _ in range(batches.batches_per_epoch)]
  slots = sum(b['inputs'].size + b['targets'].size for b in epoch)
  zeros = sum((b['inputs'] == 0).sum() + (b['targets'] == 0).sum()
              for b in epoch)
  assert batches.padding_fraction == pytest.approx(zeros / slots)
  assert batches.padding_fraction < 0.25
  # Sorted pools, but batches served in shuffled order, not longest first.
  widths = [b['inputs'].shape[1] for b in epoch]
  assert widths != sorted(widths, reverse=True)
  assert widths[:30] != sorted(widths[:30], reverse=True)


@pytest.mark.parametrize('tokens_per_batch, row_multiple',
                         [(512, 1), (1000, 1), (1000, 4), (700, 8)])
def test_bucketed_token_slots_per_batch(tokens_per_batch, row_multiple):
  examples = random_examples(400, max_len=64, min_len=3)
  batches = bucketed(examples, tokens_per_batch=tokens_per_batch,
                     row_multiple=row_multiple)
  full = 0
  for _ in range(batches.batches_per_epoch):
    batch = next(batches)
    if -1 in unbucket(batch, examples):
      continue  # the part-filled batch
    full += 1
    assert tokens_per_batch / 2 <= batch['inputs'].size <= tokens_per_batch
  assert full >= batches.batches_per_epoch - 1


def test_bucketed_rejects_bad_examples():
  with raises_naming(ValueError, 'source of 71 tokens', 'max_length=64',
                     'filter_long'):
    bucketed([([3] * 70 + [EOS], [EOS])])
  with raises_naming(ValueError, 'No training examples', 'config.data'):
    bucketed([])
  with pytest.raises(ValueError, match='length_multiple=0'):
    bucketed([([3, EOS], [EOS])], length_multiple=0)


# ----------------------------------------------------------------------------
# padded_batches
# ----------------------------------------------------------------------------


def test_padded_batches_restore_order_and_pad_with_zeros():
  examples = random_examples(101, max_len=40, correlated=False)
  batches = batching.padded_batches(examples, batch_size=12,
                                    length_multiple=8, row_multiple=8)
  restored = [None] * len(examples)
  for batch in batches:
    assert set(batch) == {'inputs', 'targets', 'index'}
    rows = len(batch['index'])
    assert rows % 8 == 0 and rows <= 16
    for k in ('inputs', 'targets'):
      assert batch[k].shape[0] == rows and batch[k].shape[1] % 8 == 0
      assert batch[k].dtype == np.int32
    for row, i in enumerate(batch['index']):
      if i < 0:  # filler rows are all padding
        assert not batch['inputs'][row].any()
        assert not batch['targets'][row].any()
        continue
      assert restored[i] is None
      sides = []
      for k, want in zip(('inputs', 'targets'), examples[i]):
        np.testing.assert_array_equal(batch[k][row, :len(want)], want)
        assert not batch[k][row, len(want):].any()
        sides.append(want)
      restored[i] = tuple(sides)
    # Widths are those of the batch's longest example, rounded up.
    real = batch['index'][batch['index'] >= 0]
    longest = max(len(examples[i][0]) for i in real)
    assert batch['inputs'].shape[1] == -(-longest // 8) * 8
  assert_same_examples(restored, examples)
  assert sum((b['index'] < 0).sum() for b in batches) == 8 * 16 + 8 - 101


def test_padded_batches_sorting_keeps_padding_low():
  examples = random_examples(400, max_len=60, correlated=False)
  batches = batching.padded_batches(examples, batch_size=16,
                                    length_multiple=1)
  slots = sum(b['inputs'].size for b in batches)
  tokens = sum(len(s) for s, _ in examples)
  assert 1 - tokens / slots < 0.05
  assert collections.Counter(len(b['index']) for b in batches) == {16: 25}


def test_padded_batches_allow_empty_targets():
  examples = [(np.array([5, EOS]), np.zeros(0, np.int32))] * 3
  (batch,) = batching.padded_batches(examples, batch_size=4)
  assert batch['inputs'].shape == (3, 8) and not batch['targets'].any()
  np.testing.assert_array_equal(sorted(batch['index']), [0, 1, 2])


def test_filter_long_can_truncate_keeping_eos(caplog):
  examples = [(np.arange(1, 31), np.array([5, 6, 2])),
              (np.array([3, 2]), np.array([4, 2]))]
  kept, changed = batching.filter_long(examples, 25, too_long='truncate')
  assert changed == 1 and len(kept) == 2
  assert len(kept[0][0]) == 25 and kept[0][0][-1] == 30
  np.testing.assert_array_equal(kept[0][0][:24], np.arange(1, 25))
  assert 'Truncated 1 of 2 examples' in caplog.text
  with raises_naming(ValueError, "config.data.too_long='cut'", "'drop'",
                     "'truncate'"):
    batching.filter_long(examples, 25, too_long='cut')
