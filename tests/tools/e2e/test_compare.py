"""The comparison tool: RNNs with and without attention, end to end."""

import os

import pytest

from transformer.tools import compare


# Trains two models end to end; the models are tested in test_rnn.
@pytest.mark.slow
def test_compare_trains_rnn_variants_and_writes_table_and_plot(tmp_path):
  # Without and with attention (the dot variant trains the same way).
  compare.compare(str(tmp_path), models=['rnn', 'rnn_attention'],
                  args='runlocal')
  table = (tmp_path / 'comparison.md').read_text()
  for name in ('rnn', 'rnn_attention'):
    assert f'| {name} |' in table
    assert os.path.exists(tmp_path / name / 'progress.json')
    assert os.path.exists(tmp_path / name / 'plots' /
                          'cross_attention_step6_alignment.png') == (
                              name != 'rnn')
  assert 'BLEU by source length' in table
  assert (tmp_path / 'bleu_by_length.png').stat().st_size > 10_000
