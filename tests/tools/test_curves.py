"""The curves command: runs' TensorBoard scalars as one figure and a table
of last values with their mean and range."""

import os
import subprocess
import sys

import pytest

from transformer import metrics
from transformer.insight import plots
from transformer.tools import curves

REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
PNG = b'\x89PNG'


def write_run(workdir, scalars):
  """One event file of {step: {tag: value}} in `workdir`, as training
  writes them."""
  writer = metrics.MetricWriter(str(workdir))
  for step, values in scalars.items():
    writer.write_scalars(step, values)
  writer.close()


@pytest.fixture(name='two_runs')
def fixture_two_runs(tmp_path):
  first, second = tmp_path / 'seed0', tmp_path / 'seed1'
  write_run(first, {100: {'train/loss': 5.0},
                    200: {'train/loss': 4.0, 'eval/bleu': 30.0}})
  write_run(first, {300: {'train/loss': 3.0, 'eval/bleu': 33.0,
                          'eval_averaged/bleu': 35.0}})
  write_run(second, {100: {'train/loss': 6.0}, 300: {'train/loss': 2.0,
                                                     'eval/bleu': 37.0}})
  return [str(first), str(second)]


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
  with pytest.raises(ValueError, match=r"'eval/rouge' matches no scalar of "
                     r'these runs; they have eval/bleu, eval_averaged/bleu, '
                     r'train/loss\.'):
    curves.select(runs, ['eval/rouge'])


def test_refuses_mismatched_labels_and_runs_without_scalars(tmp_path,
                                                            two_runs):
  with pytest.raises(ValueError, match='1 labels for 2 workdirs'):
    curves.read(two_runs, ['only one'])
  with pytest.raises(ValueError, match='repeats a label'):
    curves.read(two_runs, ['same', 'same'])
  with pytest.raises(FileNotFoundError, match='nowhere does not exist'):
    curves.read([str(tmp_path / 'nowhere')])
  (tmp_path / 'empty').mkdir()
  with pytest.raises(ValueError, match='has no TensorBoard scalars .* train '
                     'into it first'):
    curves.read([str(tmp_path / 'empty')])
  # Default labels: the workdirs' folder names, which must differ.
  assert list(curves.read(two_runs)) == ['seed0', 'seed1']
  other = tmp_path / 'elsewhere' / 'seed0'
  write_run(other, {1: {'train/loss': 1.0}})
  with pytest.raises(ValueError, match="the workdirs' folder names: "
                     r"\['seed0', 'seed0'\] repeats a label"):
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


def test_command_prints_the_table_writes_the_figure_and_keeps_files(
    tmp_path, two_runs):
  output = tmp_path / 'curves.png'
  args = [sys.executable, '-m', 'transformer.tools.curves',
          f'--workdirs={",".join(two_runs)}',
          '--labels="seed 0, 4,000 steps",seed 1', f'--output={output}']
  run = subprocess.run(args, cwd=REPO, capture_output=True, check=False,
                       timeout=300)
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert 'eval/bleu' in run.stdout.decode()
  # A quoted label keeps its commas (the help and the mismatch error say so).
  assert 'seed 0, 4,000 steps' in run.stdout.decode()
  assert output.read_bytes()[:4] == PNG
  again = subprocess.run(args, cwd=REPO, capture_output=True, check=False,
                         timeout=300)
  assert again.returncode != 0
  assert f'{output} is already there' in again.stderr.decode()
