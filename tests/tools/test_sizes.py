"""The lectures' model-size table, computed without allocating."""

import pytest

from transformer.tools import sizes


def test_every_row_is_near_its_published_count():
  table = sizes.table()
  for name, module, size, published, *_ in sizes.ROWS:
    count = sizes.parameters(module, size)
    # Gopher's 280B is the farthest: its own norms and position scheme.
    if published is not None:  # ViLBERT: test_vilbert checks its count
      assert count == pytest.approx(published, rel=0.1), name
    assert f'{count:,}' in table
  assert sizes.parameters(sizes.encoder, 'bert-base') == 109_482_240
