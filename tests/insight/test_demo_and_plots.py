"""Attention plots and metric writers (the demo command and the
TensorFlow boundary: e2e/test_demo_and_plots_e2e.py)."""

import os

import numpy as np

from conftest import raises_naming
from transformer import metrics
from transformer.insight import plots


def test_plot_attention_writes_png_and_checks_labels(tmp_path):
  weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(2, 3))
  path = plots.plot_attention(weights, list('abc'), list('wxyz'),
                              str(tmp_path / 'sub' / 'a.png'),
                              titles=['head 0', 'head 1'])
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with raises_naming(ValueError, '2 query', '4 key', '(3, 4)'):
    plots.plot_attention(weights, list('ab'), list('wxyz'),
                         str(tmp_path / 'b.png'))


def test_writers_of_the_same_second_keep_each_their_scalars(tmp_path):
  # A run resumed within the second its last writer closed: tensorboardX
  # alone would give both writers one file name and the second would empty
  # the first's.
  for step in (1, 2, 3):
    writer = metrics.MetricWriter(str(tmp_path))
    writer.write_scalars(step, {'train/loss': float(step)})
    writer.close()
  assert len(os.listdir(tmp_path)) == 3
  assert metrics.read_scalars(str(tmp_path)) == {
      'train/loss': {1: 1.0, 2: 2.0, 3: 3.0}}
