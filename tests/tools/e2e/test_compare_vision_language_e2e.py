"""The vision-and-language comparison end to end under runlocal."""

import os

import pytest

from transformer.tools import compare_vision_language as compare


# Eleven runlocal trainings; each task is tested in test_vision_language.
@pytest.mark.slow
def test_compare_trains_every_run_and_writes_table_and_plot(tmp_path):
  text = compare.compare(str(tmp_path), args='runlocal')
  for run in compare.plan(['two_stream', 'single_stream']):
    assert os.path.exists(tmp_path / run.name / 'progress.json')
  assert text.count('| yes |') == 2 and '| question only' in text
  assert (tmp_path / 'comparison.png').stat().st_size > 10_000
  # A second call only evaluates the finished runs and writes the same.
  assert compare.compare(str(tmp_path), args='runlocal') == text

