"""One id order for every published vocabulary: padding 0, EOS 1, unknown
2, the rest in published order, `last` at the end; tables move with it and
back exactly."""

import numpy as np
import pytest

from conftest import raises_naming
from transformer.data import published_ids


def _random_vocabularies(count: int = 40):
  """(size, pad, eos, unk, last) drawn over sizes and special positions,
  padding or unknown absent in some."""
  rng = np.random.default_rng(0)
  for _ in range(count):
    size = int(rng.integers(4, 60))
    pad, eos, unk, mask = rng.permutation(size)[:4].tolist()
    yield (size, pad if rng.random() < 0.5 else None, eos,
           unk if rng.random() < 0.7 else None,
           [mask] if rng.random() < 0.3 else [])


@pytest.mark.parametrize('size,pad,eos,unk,last',
                         list(_random_vocabularies()))
def test_the_order_puts_specials_first_and_round_trips(size, pad, eos, unk,
                                                       last):
  ids = published_ids.IdOrder.of(size, pad=pad, eos=eos, unk=unk, last=last)
  assert len(ids) == size + (pad is None)
  assert ids.added_padding == (pad is None)
  assert ids.published_size == size
  published = np.arange(size)
  ours = ids.to_ours(published)
  np.testing.assert_array_equal(ids.to_published(ours), published)
  assert ours[eos] == 1 and 0 not in ours[[eos] + last] and (
      pad is None or ours[pad] == 0)
  if unk is not None:
    assert ours[unk] == 2
  if last:
    assert ours[last[0]] == len(ids) - 1
  others = np.setdiff1d(published, [i for i in (pad, eos, unk, *last)
                                    if i is not None])
  assert (np.diff(ours[others]) == 1).all()  # in published order
  table = np.random.default_rng(size).normal(size=(size, 3))
  rows = ids.rows(table)
  np.testing.assert_array_equal(rows[ids.to_ours(published)], table)
  if pad is None:
    np.testing.assert_array_equal(rows[0], 0)
  np.testing.assert_array_equal(ids.published_rows(rows), table)
  columns = ids.rows(table.T, axis=1)
  np.testing.assert_array_equal(columns, rows.T)
  np.testing.assert_array_equal(ids.published_rows(columns, axis=1), table.T)
  again = published_ids.IdOrder(ids.to_json()['order'])
  np.testing.assert_array_equal(again.order, ids.order)


def test_added_padding_has_no_published_id():
  ids = published_ids.IdOrder.of(5, eos=4)
  with raises_naming(ValueError, 'Padding', 'no id in the published'):
    ids.to_published([1, 0])


@pytest.mark.parametrize('order', [[0, 1, 1], [0, 2], [1, -1, 0],
                                   [[0, 1]]])
def test_a_damaged_order_is_refused(order):
  with raises_naming(ValueError, 'once each', 'convert the checkpoint again'):
    published_ids.IdOrder(order)


@pytest.mark.parametrize('specials', [dict(eos=5), dict(eos=1, pad=1),
                                      dict(eos=1, unk=-1),
                                      dict(eos=0, last=[0])])
def test_special_ids_outside_or_shared_are_refused(specials):
  with raises_naming(ValueError, 'distinct ids of the 5-id vocabulary',
                     'download them together'):
    published_ids.IdOrder.of(5, **specials)
