"""The demo command (it trains two encoders), and the TensorFlow
and torch boundaries, checked in processes of their own."""

import subprocess
import sys

import pytest

from transformer.tools import demo


# Trains two encoders for about 15 s (the demo).
@pytest.mark.slow
def test_demo_learns_the_alignment_only_with_positions(tmp_path, capsys):
  results = demo.run(str(tmp_path), steps=300)
  assert results['with positions'] > 0.9
  # Permutation equivariance: without positions reversal stays far off.
  assert results['without positions'] < 0.5
  assert (tmp_path / 'reverse_attention.png').stat().st_size > 10_000
  assert 'key attended most' in capsys.readouterr().out


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
