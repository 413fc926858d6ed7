"""Reproducing tables end to end: a two-row spec (conftest's TINY_SPEC)
trained on the offline task, skips of finished rows, failed and
inexpressible rows in the table, rows in processes of their own, signals
to a process group, seeds, and the command's output."""

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

import pytest

from conftest import _parsed
from conftest import load_experiment
from conftest import raises_naming
from conftest import REPO
from conftest import TABLE3
from transformer import metrics
from transformer import train
from transformer.reproduce import outcomes
from transformer.reproduce import rows as reproduce_rows
from transformer.reproduce import specs


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
  assert _cells(text, 'a new field')[-1].startswith('not expressible: ')
  assert 'model.no_such' in _cells(text, 'a new field')[-1]


def test_the_command_fails_naming_each_failed_row(ran, spec_path, tmp_path):
  workdir = str(tmp_path / 'rows')  # a copy: collecting rewrites the table
  shutil.copytree(ran[0], workdir)
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={workdir}', '--scale=paper',
       '--launch=collect'], cwd=REPO, capture_output=True, text=True,
      check=False, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 1, run.stderr[-2000:]
  assert 'Row broken' in run.stderr
  assert 'config.train.keep_checkpoints=0' in run.stderr
  # The last line names every row without a result, the inexpressible too.
  last = run.stderr.splitlines()[-1]
  assert '2 row(s)' in last and 'failed: broken' in last, last
  assert 'not expressible: novel' in last
  assert 'Traceback' not in run.stderr
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
  with raises_naming(ValueError, '--parallel=2', '--launch=local'):
    reproduce_rows.reproduce(spec_path, str(tmp_path), scale='paper',
                             rows=[], launch='print', parallel=2)


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


def test_a_workdir_holds_one_table_at_one_scale(ran, spec_path):
  workdir, _ = ran
  with raises_naming(ValueError, f'--workdir={workdir}',
                     'tiny_table.py scale=paper', 'choose another --workdir'):
    reproduce_rows.reproduce(TABLE3, workdir, scale='paper', rows=['base'],
                             launch='collect')


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


def test_command_line_prints_slurm_lines(spec_path, tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={tmp_path}', '--rows=h2,B',
       '--launch=print'],
      cwd=REPO, capture_output=True, text=True, check=False,
      env={**os.environ, 'PYTHONPATH': REPO})
  lines = result.stdout.splitlines()
  assert lines[0].startswith('sbatch --job-name=tiny-table-h2 '
                             'launch/slurm_gpu.sbatch --config=')
  assert lines[1].startswith('# novel: not expressible')
  # A row that cannot run fails the command, named last.
  assert result.returncode == 1, result.stderr
  assert 'cannot run (not expressible: novel)' in (
      result.stderr.splitlines()[-1])
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.reproduce',
       f'--table={spec_path}', f'--workdir={tmp_path}', '--rows=Z'],
      cwd=REPO, capture_output=True,
      text=True, check=False, env={**os.environ, 'PYTHONPATH': REPO})
  assert result.returncode == 2
  assert 'Error: --rows' in result.stderr and "['Z']" in result.stderr
  assert 'A, B, base, broken, h2, novel' in result.stderr


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

