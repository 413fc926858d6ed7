"""Experiments are found by name or file from any directory. The package
as `pip install .` gives it: e2e/test_installed_e2e.py."""

import os

from transformer import configs


def test_experiments_are_named_by_name_or_file(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  by_name = configs.experiment_file('mt_offline:runlocal')
  assert by_name == os.path.join(configs.EXPERIMENTS,
                                 'mt_offline.py') + ':runlocal'
  assert configs.experiment_file('paper/vaswani2017_table3').endswith(
      os.path.join('experiments', 'paper', 'vaswani2017_table3.py'))
  # The checkout's path works from any directory, an unknown name is
  # left for the caller to refuse.
  assert configs.experiment_file('experiments/glue.py:x=1') == os.path.join(
      configs.EXPERIMENTS, 'glue.py') + ':x=1'
  assert configs.experiment_file('nope') == 'nope'
  assert 'mt_offline' in configs.experiment_names()
  assert '__init__' not in configs.experiment_names()
