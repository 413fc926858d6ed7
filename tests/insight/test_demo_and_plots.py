"""The README's first command, attention plots, and the TensorFlow boundary."""

import os
import subprocess
import sys

import numpy as np
import pytest

from transformer import metrics
from transformer.insight import plots
from transformer.tools import demo


# Trains two encoders for about 15 s (the README demo).
@pytest.mark.slow
def test_demo_learns_the_alignment_only_with_positions(tmp_path, capsys):
  results = demo.run(str(tmp_path), steps=300)
  assert results['with positions'] > 0.9
  # Permutation equivariance: without positions reversal stays far off.
  assert results['without positions'] < 0.5
  assert (tmp_path / 'reverse_attention.png').stat().st_size > 10_000
  assert 'key attended most' in capsys.readouterr().out


def test_plot_attention_writes_png_and_checks_labels(tmp_path):
  weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(2, 3))
  path = plots.plot_attention(weights, list('abc'), list('wxyz'),
                              str(tmp_path / 'sub' / 'a.png'),
                              titles=['head 0', 'head 1'])
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(ValueError, match='labels'):
    plots.plot_attention(weights, list('ab'), list('wxyz'),
                         str(tmp_path / 'b.png'))


@pytest.mark.parametrize('modules', [
    'transformer.attention, transformer.layers, transformer.insight.plots, '
    'transformer.tools.demo, transformer.train, transformer.tasks.translation, '
    'transformer.data.generated.offline_mt, transformer.data.parallel_text, '
    'transformer.data.tfds_reader, transformer.main, '
    'transformer.tasks.language_modeling, transformer.models.rnn',
    # Entry points of their own: their flags would clash.
    'transformer.tools.translate', 'transformer.tools.generate',
    'transformer.tools.compare', 'transformer.tools.predict',
    'transformer.tools.reproduce',
])
def test_training_path_does_not_import_tensorflow(modules):
  code = (f'import sys, {modules}; print(sorted(m for m in sys.modules '
          f'if m.startswith("tensorflow")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True).stdout
  assert out.strip() == '[]'


def test_metric_writing_imports_no_torch_where_it_is_installed(tmp_path):
  # tensorboardX imports torch where it is installed; scalars need none of
  # it, and importing it cost every start 3 s on a CPU.
  pytest.importorskip('torch')
  code = ('import sys; from transformer import metrics; '
          f'writer = metrics.MetricWriter({str(tmp_path)!r}); '
          'writer.write_scalars(1, {"train/loss": 2.5}); writer.close(); '
          'print("torch" in sys.modules); '
          f'print(metrics.read_scalars({str(tmp_path)!r}))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True).stdout.split('\n')
  assert out[:2] == ['False', "{'train/loss': {1: 2.5}}"], out


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
