"""Sharded training on this process's single device: per-host batches.
(The multi-device tests, in subprocesses with simulated CPU devices:
e2e/test_sharding_e2e.py.)"""

import numpy as np

from transformer import sharding


def test_host_rows_and_global_batch_on_one_process():
  mesh = sharding.make_mesh({'data': -1})
  assert sharding.host_rows(mesh, 6) == slice(0, 6)
  batch = {'x': np.arange(12).reshape(6, 2)}
  whole = sharding.global_batch(batch, mesh)
  local = sharding.global_batch(sharding.HostRows(batch, 6), mesh)
  np.testing.assert_array_equal(whole['x'], local['x'])
