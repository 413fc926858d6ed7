"""Reproducing tables: a two-row spec end to end on the offline task, skips
of finished rows, failed and inexpressible rows in the table, the printed
launch commands, and the parameter column of Vaswani et al.'s Table 3."""

import csv
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import pytest

from conftest import load_experiment
from conftest import REPO
from transformer import attention
from transformer import faults
from transformer import metrics
from transformer import train
from transformer.reproduce import outcomes
from transformer.reproduce import rows as reproduce_rows
from transformer.reproduce import specs

TABLE2 = os.path.join(REPO, 'experiments', 'paper', 'vaswani2017_table2.py')
TABLE3 = os.path.join(REPO, 'experiments', 'paper', 'vaswani2017_table3.py')

# Two tiny rows that train, one whose config the trainer refuses (a failed
# row), one that sets a field the config does not have.
TINY_SPEC = """
from transformer.reproduce.specs import Column, Row, Scale

TITLE = 'Tiny table'
SCALES = {'paper': Scale('experiments/mt_offline.py:runlocal', 'tiny offline',
                         {'train.num_steps': 4, 'train.eval_every': 4,
                          'train.checkpoint_every': 4, 'train.log_every': 2,
                          'data.num_train': 300, 'data.num_test': 4,
                          'data.vocab_size': 100})}
COLUMNS = (Column('h', 'h', 'setting:h'),
           Column('ppl', 'PPL', 'metric:eval/perplexity', paper=True),
           Column('bleu', 'BLEU', 'metric:eval/bleu', paper=True),
           Column('params', 'params', 'params', digits=4, paper=True))
ROWS = (Row('base', 'base', 'base', {'paper': {}},
            dict(ppl='9.99', bleu='1.0', params=1)),
        Row('h2', 'A', 'h=2', {'paper': {'model.num_heads': 2}},
            dict(ppl='8.88')),
        Row('broken', 'A', 'no checkpoints',
            {'paper': {'train.keep_checkpoints': 0}}),
        Row('novel', 'B', 'a new field', {'paper': {'model.no_such': 1}}))
NOTES = 'Tiny notes.'
"""


@pytest.fixture(scope='module')
def spec_path(tmp_path_factory):
  path = tmp_path_factory.mktemp('spec') / 'tiny_table.py'
  path.write_text(TINY_SPEC)
  return str(path)


@pytest.fixture(scope='module')
def ran(spec_path, tmp_path_factory):
  """The tiny table run once: (workdir, table text)."""
  workdir = str(tmp_path_factory.mktemp('rows'))
  text = reproduce_rows.reproduce(spec_path, workdir, scale='paper', rows=[],
                                  launch='local', command='tiny command')
  return workdir, text


def _cells(text, label):
  line = next(l for l in text.splitlines() if l.startswith(f'| {label} |'))
  return [c.strip() for c in line.strip('|').split('|')]


def test_tiny_table_trains_rows_and_renders_ours_beside_paper(ran, spec_path):
  workdir, text = ran
  assert text == open(os.path.join(workdir, 'table.md')).read()
  assert 'Scale: **paper**: tiny offline' in text
  assert '`tiny command`' in text and text.rstrip().endswith('Tiny notes.')
  spec = specs.load_spec(spec_path)
  for name, label, heads in (('base', 'base', 4), ('h2', 'h=2', 2)):
    setup = specs.setup(spec, spec.ROWS[0 if name == 'base' else 1],
                        'paper')
    final = metrics.read_scalars(os.path.join(workdir, name))
    _, h, ppl, ppl_paper, bleu, _, params, _, status = _cells(text, label)
    assert (h, status) == (str(heads), 'finished')
    assert float(ppl) == pytest.approx(final['eval/perplexity'][4], abs=5e-3)
    assert float(bleu) == pytest.approx(final['eval/bleu'][4], abs=5e-3)
    assert float(params) == pytest.approx(
        specs.parameters(setup.model) / 1e6, abs=5e-5)
    assert ppl_paper == {'base': '9.99', 'h2': '8.88'}[name]
  assert _cells(text, 'base')[7] == '1'  # the paper's figure
  # Heads do not change the parameter count (d_k = D / h).
  assert _cells(text, 'base')[6] == _cells(text, 'h=2')[6]
  with open(os.path.join(workdir, 'table.csv')) as f:
    records = {r['row']: r for r in csv.DictReader(f)}
  assert records['base']['status'] == 'finished'
  assert records['base']['ppl_paper'] == '9.99'


def test_failed_and_inexpressible_rows_are_reported_not_dropped(ran):
  workdir, text = ran
  status = _cells(text, 'no checkpoints')[-1]
  assert status.startswith('failed: ValueError: config.train.keep_checkpoints')
  assert _cells(text, 'no checkpoints')[2] == ''  # no perplexity shown
  assert os.path.exists(os.path.join(workdir, 'broken',
                                     outcomes.FAILURE_NOTE))
  assert _cells(text, 'a new field')[-1].startswith(
      'not expressible: the translation config has no field model.no_such')


def test_the_command_fails_naming_each_failed_row(ran, spec_path, tmp_path):
  workdir = str(tmp_path / 'rows')  # a copy: collecting rewrites the table
  shutil.copytree(ran[0], workdir)
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={workdir}', '--scale=paper',
       '--launch=collect'], cwd=REPO, capture_output=True, text=True,
      check=False, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 1, run.stderr[-2000:]
  assert 'Row broken failed: ValueError: config.train.keep_checkpoints' in \
      run.stderr
  assert '1 row(s) failed' in run.stderr and 'Traceback' not in run.stderr
  assert f'Written: {workdir}/table.md' in run.stdout  # written all the same
  ok = subprocess.run(  # the rows that finished alone: success
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={workdir}', '--scale=paper',
       '--launch=collect', '--rows=base,h2'], cwd=REPO, capture_output=True,
      text=True, check=False, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert ok.returncode == 0, ok.stderr[-2000:]


def test_finished_rows_are_not_run_again_and_failed_ones_are(
    ran, spec_path, monkeypatch):
  workdir, _ = ran
  events = {name: [os.path.getmtime(os.path.join(workdir, name, f))
                   for f in os.listdir(os.path.join(workdir, name))]
            for name in ('base', 'h2')}
  called = []

  def fake_train(config, rowdir):
    called.append(os.path.basename(rowdir))
    raise RuntimeError('boom')
  monkeypatch.setattr(train, 'train_and_evaluate', fake_train)
  text = reproduce_rows.reproduce(spec_path, workdir, scale='paper', rows=[],
                                  launch='local')
  assert called == ['broken']
  assert _cells(text, 'no checkpoints')[-1] == 'failed: RuntimeError: boom'
  assert _cells(text, 'base')[-1] == 'finished'
  for name, times in events.items():
    assert times == [os.path.getmtime(os.path.join(workdir, name, f))
                     for f in os.listdir(os.path.join(workdir, name))]


def test_rows_in_processes_of_their_own_match_in_process_rows(
    ran, spec_path, tmp_path):
  """--parallel=2: two rows trained side by side, each by its own
  `python -m transformer.main`; the same results and failure reasons as
  the rows trained in this process."""
  text = reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                                  rows=['h2', 'broken'], launch='local',
                                  parallel=2)
  assert _cells(text, 'h=2')[2:4] == _cells(ran[1], 'h=2')[2:4]  # PPL
  assert _cells(text, 'h=2')[-1] == 'finished'
  # In-process 'failed: ValueError: MESSAGE'; here the command's exit
  # status (2: a user error) with the same message.
  message = _cells(ran[1], 'no checkpoints')[-1].split('ValueError: ')[1]
  assert _cells(text, 'no checkpoints')[-1] == (
      f'failed: exit status 2: {message}')
  for row in ('h2', 'broken'):
    assert os.path.getsize(tmp_path / row / 'reproduce.log')
  with pytest.raises(ValueError, match='--parallel=2.*--launch=local'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=[], launch='print', parallel=2)


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
  with pytest.raises(faults.Preempted, match='signal to row h2'):
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
  with pytest.raises(faults.Preempted,
                     match=r'signal to this command \(SIGTERM'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=['base', 'h2', 'broken'], launch='local',
                             parallel=2)
  assert [p.row for p in started] == ['base', 'h2']
  assert all(p.terminated for p in started)
  assert signal.getsignal(signal.SIGTERM) is before  # handler restored


# A row that handles SIGTERM as `faults.PreemptionSignals` does: the first
# one checkpoints and exits 75, a second one exits at once without.
_ROW_PROCESS = """
import os, signal, sys, time
workdir = sys.argv[-1].split('=', 1)[1]
os.makedirs(workdir, exist_ok=True)
seen = []
def handle(signum, frame):
  seen.append(signum)
  if len(seen) > 1:
    open(os.path.join(workdir, 'second_signal'), 'w').close()
    os._exit(143)
signal.signal(signal.SIGTERM, handle)
signal.signal(signal.SIGINT, handle)
open(os.path.join(workdir, 'ready'), 'w').close()
while not seen:
  time.sleep(0.05)
time.sleep(0.5)  # 'writing the checkpoint': a second signal would cut it
open(os.path.join(workdir, 'checkpointed'), 'w').close()
sys.exit(75)
"""

_PARENT = """
import subprocess, sys
from transformer.reproduce import rows
real = subprocess.Popen
def popen(args, **kwargs):  # each row runs _ROW_PROCESS instead of training
  return real([sys.executable, '-c', open(sys.argv[3]).read(), args[-1]],
              **kwargs)
subprocess.Popen = popen
rows.reproduce(sys.argv[1], sys.argv[2], scale='paper', rows=['base', 'h2'],
               launch='local', parallel=2)
"""


def test_a_signal_to_the_process_group_reaches_each_row_once(spec_path,
                                                             tmp_path):
  """Ctrl-C or `timeout` signal the whole process group: each row must get
  one SIGTERM (and checkpoint), not the group's and then the command's."""
  row_script = tmp_path / 'row.py'
  row_script.write_text(_ROW_PROCESS)
  workdir = tmp_path / 'table'
  parent = subprocess.Popen(
      [sys.executable, '-c', _PARENT, spec_path, str(workdir),
       str(row_script)], cwd=REPO, start_new_session=True,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  ready = [workdir / row / 'ready' for row in ('base', 'h2')]
  deadline = time.time() + 60
  while not all(r.exists() for r in ready) and time.time() < deadline:
    time.sleep(0.1)
  assert all(r.exists() for r in ready), parent.communicate()[0]
  os.killpg(parent.pid, signal.SIGTERM)  # as the shell's Ctrl-C, `timeout`
  output = parent.communicate(timeout=60)[0]
  assert 'Stopped by a signal to this command (SIGTERM)' in output, output
  for row in ('base', 'h2'):
    assert (workdir / row / 'checkpointed').exists(), output
    assert not (workdir / row / 'second_signal').exists(), output
    assert not (workdir / row / outcomes.FAILURE_NOTE).exists()


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


def test_a_workdir_holds_one_table_at_one_scale(ran, spec_path):
  workdir, _ = ran
  with pytest.raises(ValueError, match='choose another --workdir'):
    reproduce_rows.reproduce(TABLE3, workdir, scale='paper', rows=['base'],
                             launch='collect')


def _parsed(words):
  """The config that transformer.main would build from these flags."""
  argv = [w for w in words if w.startswith('--config')]
  values = flags.FlagValues()
  # config_flags registers the override flags of the command line it is
  # given at definition time.
  config_flags.DEFINE_config_file('config', None, flag_values=values,
                                  lock_config=True, sys_argv=['main', *argv])
  values(['main', *argv])
  return values.config


def test_print_mode_gives_one_launch_command_per_unfinished_row(
    spec_path, tmp_path, monkeypatch):
  monkeypatch.chdir(REPO)  # printed commands run from the repository root
  text = reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                                  rows=['base', 'A'], launch='print',
                                  launcher='local',
                                  launcher_args='--cpu_devices=2')
  lines = text.splitlines()
  assert len(lines) == 3 and not os.path.exists(tmp_path / 'base')
  spec = specs.load_spec(spec_path)
  for line, row in zip(lines, spec.ROWS):
    words = shlex.split(line)
    assert words[:2] == ['launch/local.sh', '--cpu_devices=2']
    assert words[-1] == f'--workdir={tmp_path}/{row.name}'
    expected = specs.setup(spec, row, 'paper').config
    assert _parsed(words).to_dict() == expected.to_dict()
  dry = subprocess.run(['bash', *shlex.split(lines[1]), '--dry_run'],
                       cwd=REPO, capture_output=True, text=True, check=True)
  assert '-m transformer.main' in dry.stdout
  assert '--config.model.num_heads=2' in dry.stdout
  slurm = reproduce_rows.reproduce(
      spec_path, str(tmp_path), scale='paper', rows=['h2'], launch='print',
      launcher_args='--nodes=1', launcher='slurm_gpu')
  assert shlex.split(slurm)[:4] == ['sbatch', '--job-name=tiny-table-h2',
                                    '--nodes=1', 'launch/slurm_gpu.sbatch']


def test_seeds_train_each_row_again_and_report_mean_and_spread(
    ran, spec_path, tmp_path):
  """A second seed of the finished base row: reported as missing until it
  has run, then the mean and standard deviation of the two runs' own final
  evaluations, with each seed's value in the CSV."""
  shutil.copytree(os.path.join(ran[0], 'base'), tmp_path / 'base')
  workdir = str(tmp_path)
  text = reproduce_rows.reproduce(spec_path, workdir, scale='paper',
                                  rows=['base'], launch='collect', seeds=2)
  single = metrics.read_scalars(os.path.join(workdir, 'base'))
  *_, seeds, status = _cells(text, 'base')
  assert (seeds, status) == ('1/2', 'not run: 1 of 2 seeds finished')
  assert float(_cells(text, 'base')[2]) == pytest.approx(
      single['eval/perplexity'][4], abs=5e-3)  # one value, no spread yet
  text = reproduce_rows.reproduce(spec_path, workdir, scale='paper',
                                  rows=['base'], launch='local', seeds=2)
  second = metrics.read_scalars(os.path.join(workdir, 'base.seed1'))
  with open(os.path.join(workdir, 'base.seed1', 'config.json')) as f:
    assert json.load(f)['seed'] == 1
  ppl = [single['eval/perplexity'][4], second['eval/perplexity'][4]]
  assert ppl[0] != ppl[1]  # another seed, another run
  cells = _cells(text, 'base')
  assert cells[-2:] == ['2/2', 'finished']
  assert cells[1] == '4'  # a setting: the same for every seed, no spread
  mean, spread = (float(x) for x in cells[2].split(' ± '))
  assert mean == pytest.approx(statistics.fmean(ppl), abs=5e-3)
  assert spread == pytest.approx(statistics.stdev(ppl), abs=5e-3)
  assert '2 runs per row' in text
  with open(os.path.join(workdir, 'table.csv')) as f:
    record = next(csv.DictReader(f))
  assert [float(v) for v in record['ppl_per_seed'].split(';')] == (
      pytest.approx(ppl))


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
  with pytest.raises(ValueError, match='at least one run'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=['h2'], launch='print', seeds=-1)


def test_command_line_prints_slurm_lines(spec_path, tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={tmp_path}', '--rows=h2,B',
       '--launch=print'],
      cwd=REPO, capture_output=True, text=True, check=False,
      env={**os.environ, 'PYTHONPATH': REPO})
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].startswith('sbatch --job-name=tiny-table-h2 '
                             'launch/slurm_gpu.sbatch --config=')
  assert lines[1].startswith('# novel: not expressible')
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={tmp_path}', '--rows=Z'],
      cwd=REPO, capture_output=True,
      text=True, check=False, env={**os.environ, 'PYTHONPATH': REPO})
  assert result.returncode == 2
  assert "Error: --rows: unknown ['Z']" in result.stderr


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
  with pytest.raises(ValueError, match='mount the bucket'):
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


GLUE_TABLE = os.path.join(REPO, 'experiments', 'paper', 'devlin2019_glue.py')


def test_glue_table_rows_averages_and_missing_pretraining(tmp_path,
                                                          monkeypatch):
  from transformer.reproduce import tables  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  spec = specs.load_spec(GLUE_TABLE)
  # Without the pretrained workdir every row says what to train first.
  text = reproduce_rows.reproduce(GLUE_TABLE, str(tmp_path / 'glue'),
                                  scale='reduced', rows=[], launch='collect')
  assert text.count('not ready: workdirs/bert_mlm/config.json') == 8
  # BERT-base's average over the 9 published numbers is its 79.6.
  assert '| average |  |  | 79.6 |' in text
  # With a pretrained workdir, rows set up with the encoder's sizes; ours
  # average once every row finished.
  pretrained = load_experiment('bert_mlm', 'nsp,runlocal')
  train.train_and_evaluate(pretrained, str(tmp_path / 'workdirs/bert_mlm'))
  setups = [specs.setup(spec, row, 'reduced') for row in spec.ROWS]
  assert not any(s.problem for s in setups)
  assert specs.settings(setups[4])['metric'] == 'matthews'
  assert setups[0].model.num_classes == 3 and setups[5].model.num_classes == 1
  assert specs.parameters(setups[0].model) > 0
  finished = [outcomes.Outcome('finished', {
      s.row.metric: 0.5, **({'eval/accuracy_mismatched': 0.41}
                            if s.row.name == 'mnli' else {})})
              for s in setups]
  text = tables.write(spec, 'reduced', setups, [[o] for o in finished],
                      str(tmp_path / 'out'), extra='', about='')
  assert '| average |  | 49.0 | 79.6 |' in text  # (8 x 50 + 41) / 9
