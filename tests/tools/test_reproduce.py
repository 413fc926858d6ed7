"""Reproducing tables without training: rows stopped by preemption and
signals, unfinished rows, the printed launch commands of each seed, the
parameter column of Vaswani et al.'s Table 3 and Table 2's protocol. The
two-row spec end to end: e2e/test_reproduce_e2e.py."""

import os
import shlex
import signal
import subprocess

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from conftest import _parsed
from conftest import raises_naming
from conftest import REPO
from conftest import TABLE3
from transformer import attention
from transformer import faults
from transformer.reproduce import outcomes
from transformer.reproduce import rows as reproduce_rows
from transformer.reproduce import specs
from transformer.tools import cli
from transformer.tools import reproduce as reproduce_tool

TABLE2 = os.path.join(REPO, 'experiments', 'paper', 'vaswani2017_table2.py')


def fake_rows(monkeypatch, on_poll):
  """Popen replaced by rows that run until terminated (then exit 75, as
  after a checkpoint); `on_poll(row, started)` may end one sooner. Returns
  the rows started, in order."""
  started = []

  class FakeProcess:
    def __init__(self, args, **unused_kwargs):
      self.row = os.path.basename(args[-1])
      self.returncode, self.terminated = None, False
      started.append(self)

    def poll(self):
      on_poll(self, started)
      if self.terminated:
        self.returncode = 75
      return self.returncode

    def terminate(self):
      self.terminated = True

    def wait(self, timeout=None):
      return self.returncode

  monkeypatch.setattr(subprocess, 'Popen', FakeProcess)
  return started


def test_a_preempted_row_stops_the_rows_beside_it(spec_path, tmp_path,
                                                  monkeypatch):
  def preempt_h2(row, started):
    if row.row == 'h2':
      row.returncode = 75  # checkpointed and exited
  started = fake_rows(monkeypatch, preempt_h2)
  with raises_naming(faults.Preempted, 'row h2', 'rerun the same command'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=['base', 'h2', 'broken'], launch='local',
                             parallel=2)
  assert [p.row for p in started] == ['base', 'h2']  # 'broken' never began
  assert started[0].terminated and not started[1].terminated


def test_a_signal_to_the_command_stops_every_row(spec_path, tmp_path,
                                                 monkeypatch):
  def signal_us(row, started):
    if not row.terminated and row is started[0]:
      os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` or a scheduler
  started = fake_rows(monkeypatch, signal_us)
  before = signal.getsignal(signal.SIGTERM)
  with raises_naming(faults.Preempted, 'this command (SIGTERM)',
                     'rerun the same command'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=['base', 'h2', 'broken'], launch='local',
                             parallel=2)
  assert [p.row for p in started] == ['base', 'h2']
  assert all(p.terminated for p in started)
  assert signal.getsignal(signal.SIGTERM) is before  # handler restored


def test_a_row_stopped_part_way_is_unfinished(spec_path, tmp_path):
  spec = specs.load_spec(spec_path)
  config = specs.setup(spec, spec.ROWS[0], 'paper').config
  assert outcomes.outcome(str(tmp_path), config).status == 'not run'
  (tmp_path / 'config.json').write_text(config.to_json())
  assert outcomes.outcome(str(tmp_path), config).detail == (
      'started, no checkpoint yet')
  (tmp_path / 'progress.json').write_text('{"step": 2, "train_seconds": 1}')
  state = outcomes.outcome(str(tmp_path), config)
  assert (state.status, state.detail) == ('unfinished',
                                          'trained to step 2 of 4')


def test_a_damaged_event_file_fails_its_row_not_the_table(spec_path,
                                                         tmp_path):
  from conftest import write_run  # pylint: disable=g-import-not-at-top
  spec = specs.load_spec(spec_path)
  config = specs.setup(spec, spec.ROWS[0], 'paper').config
  write_run(str(tmp_path), {1: {'eval/loss': 2.0}, 2: {'eval/loss': 1.0}})
  [path] = tmp_path.glob('events.out.tfevents*')
  data = bytearray(path.read_bytes())
  data[30] ^= 0x20  # inside the first record's data
  path.write_bytes(bytes(data))
  state = outcomes.outcome(str(tmp_path), config)
  assert state.status == 'failed' and str(path) in state.detail


def test_seeds_print_one_launch_command_per_seed(spec_path, tmp_path,
                                                 monkeypatch):
  monkeypatch.chdir(REPO)
  lines = reproduce_rows.reproduce(
      spec_path, str(tmp_path), scale='paper', rows=['h2'], launch='print',
      launcher='slurm_gpu', seeds=3).splitlines()
  names = [shlex.split(line)[1] for line in lines]
  assert names == ['--job-name=tiny-table-h2',
                   '--job-name=tiny-table-h2-seed1',
                   '--job-name=tiny-table-h2-seed2']
  for seed, line in enumerate(lines):
    words = shlex.split(line)
    assert _parsed(words).seed == seed
    assert words[-1] == f'--workdir={tmp_path}/h2' + (
        f'.seed{seed}' if seed else '')
  with raises_naming(ValueError, '--seeds=-1', 'at least one run'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=['h2'], launch='print', seeds=-1)


# Exact counts at 37,000 shared tokens (tied embeddings), beside the paper's
# rounded figures (millions).
PAPER_SCALE_PARAMETERS = {'base': (63_082_496, 65), 'B1': (55_990_784, 58),
                          'C1': (33_656_832, 36), 'big': (214_245_376, 213)}


def test_table3_parameter_column_at_paper_scale_without_training():
  spec = specs.load_spec(TABLE3)
  setups = {row.name: specs.setup(spec, row, 'paper')
            for row in spec.ROWS}
  assert len(setups) == 20
  for name, (exact, paper) in PAPER_SCALE_PARAMETERS.items():
    assert specs.parameters(setups[name].model) == exact
    assert spec.ROWS[list(setups).index(name)].paper['params'] == paper
  for name, setup in setups.items():
    assert setup.model.vocab_size == 37_000, name
    published = setup.row.paper.get('params')
    if published:  # within 7% of every rounded figure the paper gives
      count = specs.parameters(setup.model) / 1e6
      assert abs(count - published) / published < 0.07, name
  b1 = specs.settings(setups['B1'])
  assert (b1['d_k'], b1['d_v'], b1['h']) == (16, 64, 8)
  assert not setups['B1'].problem  # every model field is a config field
  assert specs.settings(setups['big'])['steps'] == 300_000
  assert setups['base'].config.eval.average_checkpoints == 1


def test_table3_reduced_rows_change_the_small_base_as_the_paper_does():
  spec = specs.load_spec(TABLE3)
  got = {row.name: specs.settings(
      specs.setup(spec, row, 'reduced', 'train.num_steps=500'))
         for row in spec.ROWS}
  assert got['base'] == dict(N=3, d_model=256, d_ff=512, h=8, d_k=32,
                             d_v=32, P_drop=0.1, eps_ls=0.1,
                             positions='sinusoidal', vocab=8_000, steps=500,
                             beam=4, alpha=0.6, max_output='input + 50',
                             averaged=1, eval_split='val')
  assert (got['A1']['h'], got['A1']['d_k']) == (1, 256)
  assert (got['A4']['h'], got['A4']['d_k']) == (32, 8)
  assert (got['B1']['d_k'], got['B1']['d_v']) == (8, 32)
  assert [got[f'C{i}']['N'] for i in (1, 2, 3)] == [1, 2, 4]
  assert (got['C4']['d_model'], got['C4']['d_k']) == (128, 16)
  assert [got['C6']['d_ff'], got['C7']['d_ff']] == [256, 1024]
  assert got['D3']['eps_ls'] == 0.0 and got['E1']['positions'] == 'learned'
  assert (got['big']['d_model'], got['big']['h'], got['big']['P_drop']) == (
      512, 16, 0.3)


def test_table2_rows_follow_the_papers_evaluation_protocol(tmp_path):
  spec = specs.load_spec(TABLE2)
  got = {row.name: specs.settings(specs.setup(spec, row,
                                                            'paper'))
         for row in spec.ROWS}
  for name, averaged, dropout, vocab in (('base_ende', 5, 0.1, 37_000),
                                         ('big_ende', 20, 0.3, 37_000),
                                         ('base_enfr', 5, 0.1, 32_000),
                                         ('big_enfr', 20, 0.1, 32_000)):
    assert (got[name]['averaged'], got[name]['P_drop'], got[name]['vocab'],
            got[name]['eval_split']) == (averaged, dropout, vocab, 'test')
    assert (got[name]['beam'], got[name]['alpha'], got[name]['max_output']) \
        == (4, 0.6, 'input + 50')
  reduced = {row.name: specs.setup(spec, row, 'reduced')
             for row in spec.ROWS}
  assert reduced['base_enfr'].problem == ('no reduced-scale equivalent in '
                                          'the table spec')
  assert specs.settings(reduced['big_ende'])['averaged'] == 20
  # The paper's base dropout, whatever mt_local's own recipe is.
  assert specs.settings(reduced['base_ende'])['P_drop'] == 0.1
  # A bucket takes printed commands only.
  printed = reproduce_rows.reproduce(TABLE2, 'gs://b/t2', scale='paper',
                                     rows=['base'], launch='print')
  assert '--workdir=gs://b/t2/base_enfr' in printed
  with raises_naming(ValueError, '--workdir=gs://b/t2', '--launch=print',
                     'gcsfuse'):
    reproduce_rows.reproduce(TABLE2, 'gs://b/t2', scale='paper', rows=[],
                             launch='collect')


def test_value_head_dim_resizes_only_values_and_output():
  layer = attention.MultiHeadAttention(num_heads=2, head_dim=3,
                                       value_head_dim=5)
  x = jnp.ones((1, 4, 8))
  variables = layer.init(jax.random.key(0), x, deterministic=True)
  shapes = jax.tree.map(lambda a: a.shape, nn.unbox(variables['params']))
  assert shapes['query']['kernel'] == shapes['key']['kernel'] == (8, 2, 3)
  assert shapes['value']['kernel'] == (8, 2, 5)
  assert shapes['out']['kernel'] == (2, 5, 8)
  assert layer.apply(variables, x, deterministic=True).shape == (1, 4, 8)


# The tiny spec with a row that cannot run (3 heads at width 32) and one
# the spec gives no equivalent at its scale.
_WITH_AN_INVALID_ROW = """
ROWS = ROWS + (Row('h3', 'A', 'h=3', {'paper': {'model.num_heads': 3}}),
               Row('absent', 'C', 'none here', {}))
"""


@pytest.fixture(name='table')
def fixture_table(spec_path, tmp_path):
  path = tmp_path / 'tiny_table.py'
  path.write_text(open(spec_path).read() + _WITH_AN_INVALID_ROW)
  return str(path)


def _reproduced(table, workdir, rows, launch):
  """The table `reproduce` gives of `rows`, and the command's exit
  status."""
  text = reproduce_rows.reproduce(table, workdir, scale='paper', rows=rows,
                                  launch=launch)
  return text, reproduce_tool.report_rows_without_result(
      table, workdir, scale='paper', rows=rows, extra='', launch=launch)


def _finished(unused_workdir, unused_config):
  return outcomes.Outcome('finished', {'eval/perplexity': 9.0}, 4, 1.0)


def test_an_invalid_row_fails_the_command_naming_it(table, tmp_path,
                                                    monkeypatch, capsys):
  """Beside a finished row, an invalid one: the table says so and the
  command exits 1 naming it last; a row with no equivalent at the scale is
  shown and is no error."""
  monkeypatch.setattr(outcomes, 'outcome', _finished)
  text, status = _reproduced(table, str(tmp_path), ['base', 'h3'],
                             'collect')
  assert 'invalid: d_model=32 is not divisible by num_heads=3' in text
  last = capsys.readouterr().err.splitlines()[-1]
  assert status == cli.RUN_FAILED
  assert '(invalid: h3)' in last and '--rows' in last, last
  text, status = _reproduced(table, str(tmp_path), ['base', 'C'],
                             'collect')
  assert status == 0 and '| none here |' in text


def test_failed_and_missing_rows_fail_the_command_naming_each(
    table, tmp_path, capsys):
  broken = tmp_path / 'broken'
  broken.mkdir()
  (broken / outcomes.FAILURE_NOTE).write_text('ValueError: no checkpoints\n')
  _, status = _reproduced(table, str(tmp_path), ['base', 'h3', 'broken'],
                          'collect')
  last = capsys.readouterr().err.splitlines()[-1]
  assert status == cli.RUN_FAILED
  for named in ('3 row(s)', 'not run: base', 'invalid: h3',
                'failed: broken', 'collect again'):
    assert named in last, last


def test_print_fails_naming_a_row_that_cannot_run(table, tmp_path, capsys):
  text, status = _reproduced(table, str(tmp_path), ['base', 'h3', 'C'],
                             'print')
  assert status == cli.RUN_FAILED and '# h3: invalid: ' in text
  last = capsys.readouterr().err.splitlines()[-1]
  assert 'cannot run (invalid: h3)' in last and 'base' not in last, last
  assert _reproduced(table, str(tmp_path), ['base', 'C'], 'print')[1] == 0
