"""The comparison command: RNNs with and without attention, end to end."""

import os

from absl import flags
import pytest

from transformer import compare


@pytest.fixture
def flag_values(tmp_path):
  """Parses compare's flags for one call and restores them afterwards."""
  saved = flags.FLAGS.flag_values_dict()
  flags.FLAGS.unparse_flags()
  yield lambda *argv: flags.FLAGS(['compare', *argv])
  flags.FLAGS.unparse_flags()
  for name in ('workdir', 'models', 'args'):
    flags.FLAGS[name].value = saved[name]


# Trains two models end to end; the models are tested in test_rnn.
@pytest.mark.slow
def test_compare_trains_rnn_variants_and_writes_table_and_plot(
    tmp_path, flag_values):
  # Without and with attention (the dot variant trains the same way).
  flag_values(f'--workdir={tmp_path}', '--models=rnn,rnn_attention',
              '--args=runlocal')
  compare.main(['compare'])
  table = (tmp_path / 'comparison.md').read_text()
  for name in ('rnn', 'rnn_attention'):
    assert f'| {name} |' in table
    assert os.path.exists(tmp_path / name / 'progress.json')
    assert os.path.exists(tmp_path / name / 'plots' /
                          'cross_attention_step6_alignment.png') == (
                              name != 'rnn')
  assert 'BLEU by source length' in table
  assert (tmp_path / 'bleu_by_length.png').stat().st_size > 10_000
