"""The curves command: runs' TensorBoard scalars as one figure and a table
of last values with their mean and range."""

import pytest

from conftest import PNG
from conftest import raises_naming
from conftest import write_run
from transformer.insight import plots
from transformer.tools import curves


def test_reads_every_event_file_of_a_resumed_run(two_runs):
  runs = curves.read(two_runs, ['a', 'b'])
  assert runs['a']['train/loss'] == {100: 5.0, 200: 4.0, 300: 3.0}
  assert runs['a']['eval/bleu'] == {200: 30.0, 300: 33.0}
  assert curves.last_values(runs, 'eval/bleu') == {'a': 33.0, 'b': 37.0}
  assert curves.last_values(runs, 'eval_averaged/bleu') == {'a': 35.0}


def test_table_gives_last_values_mean_and_range(two_runs):
  runs = curves.read(two_runs, ['seed 0', 'seed 1'])
  lines = curves.table(runs, ['train/loss', 'eval/bleu']).splitlines()
  assert lines[0].split()[:4] == ['last', 'value', 'seed', '0']
  loss = lines[1].split()
  assert loss == ['train/loss', '3', '2', '2.5', '2-3']
  bleu = lines[2].split()
  assert bleu == ['eval/bleu', '33', '37', '35', '33-37']
  # The averaged evaluation has its row, without a mean of one run.
  assert lines[3].split() == ['eval_averaged/bleu', '35', '-']


def test_table_keeps_each_value_under_a_long_label(two_runs):
  labels = ['dropout 0.1 (4000 steps)', 'b']
  lines = curves.table(curves.read(two_runs, labels),
                       ['eval/bleu']).splitlines()
  # Each value ends where its label ends in the header.
  label_end = lines[0].index(labels[0]) + len(labels[0])
  assert lines[1].index('33') + len('33') == label_end
  b_end = lines[0].index(' b ') + 2
  assert lines[1].index('37') + len('37') == b_end


def test_table_says_when_the_runs_last_steps_differ(tmp_path, two_runs):
  shorter = tmp_path / 'short'
  write_run(shorter, {100: {'train/loss': 6.0, 'eval/bleu': 20.0}})
  runs = curves.read([two_runs[0], str(shorter)], ['long', 'short'])
  text = curves.table(runs, ['eval/bleu'])
  assert '(at steps long: 300, short: 100)' in text
  assert 'at steps' not in curves.table(curves.read(two_runs), ['eval/bleu'])


def test_patterns_select_tags_in_order_and_keep_averages_to_their_panel(
    two_runs):
  runs = curves.read(two_runs)
  assert curves.select(runs, ['eval/*', 'train/loss']) == [
      'eval/bleu', 'train/loss']
  assert curves.select(runs, ['*']) == ['eval/bleu', 'train/loss']
  assert curves.select(runs, ['eval_averaged/bleu']) == ['eval_averaged/bleu']
  with raises_naming(ValueError, '--tags', "'eval/rouge'",
                     'eval/bleu, eval_averaged/bleu, train/loss'):
    curves.select(runs, ['eval/rouge'])


def test_refuses_mismatched_labels_and_runs_without_scalars(tmp_path,
                                                            two_runs):
  with raises_naming(ValueError, '--labels', '1 labels', '2 workdirs',
                     'one per workdir'):
    curves.read(two_runs, ['only one'])
  with raises_naming(ValueError, '--labels', "['same', 'same']",
                     '--labels="seed 0,seed 1"'):
    curves.read(two_runs, ['same', 'same'])
  with raises_naming(FileNotFoundError, '--workdirs',
                     str(tmp_path / 'nowhere')):
    curves.read([str(tmp_path / 'nowhere')])
  (tmp_path / 'empty').mkdir()
  with raises_naming(ValueError, '--workdirs', str(tmp_path / 'empty'),
                     'events.out.tfevents', 'train into it first'):
    curves.read([str(tmp_path / 'empty')])
  # Default labels: the workdirs' folder names, which must differ.
  assert list(curves.read(two_runs)) == ['seed0', 'seed1']
  other = tmp_path / 'elsewhere' / 'seed0'
  write_run(other, {1: {'train/loss': 1.0}})
  with raises_naming(ValueError, "folder names", "['seed0', 'seed0']",
                     '--labels="seed 0,seed 1"'):
    curves.read([two_runs[0], str(other)])


def test_plot_draws_each_run_and_the_averaged_star(tmp_path, two_runs):
  runs = curves.read(two_runs)
  plain = plots.plot_runs(runs, ['eval/bleu'], str(tmp_path / 'plain.png'))
  starred = plots.plot_runs(runs, ['eval/bleu'], str(tmp_path / 'star.png'),
                            marked={'eval/bleu': 'eval_averaged/bleu'})
  for path in (plain, starred):
    with open(path, 'rb') as f:
      assert f.read(4) == PNG
  with open(plain, 'rb') as f, open(starred, 'rb') as g:
    assert f.read() != g.read()
  with pytest.raises(ValueError, match='No tags'):
    plots.plot_runs(runs, [], str(tmp_path / 'none.png'))
