"""Running the rows of a table spec: train each here, print its launch/
command, or only read its results; then write the table. The logic of
`python -m transformer.tools.reproduce`, without flags (so tests and
notebooks call it)."""

import datetime
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import jax

from transformer import faults
from transformer import storage
from transformer import train
from transformer.reproduce import outcomes
from transformer.reproduce import specs
from transformer.reproduce import tables

LAUNCHES = ('local', 'print', 'collect')
LAUNCHERS = ('slurm_gpu', 'tpu_vm', 'local')


def launch_command(setup: specs.RowSetup, rowdir: str, *,
                   launcher: str, launcher_args: str, prefix: str) -> str:
  """The shell command that trains one row with a launch/ script."""
  extra = shlex.split(launcher_args)
  name = f'{prefix}-{os.path.basename(rowdir)}'.lower()
  name = name.replace('_', '-').replace('.', '-')
  run = [*setup.flags(), f'--workdir={rowdir}']
  if launcher == 'slurm_gpu':
    words = ['sbatch', f'--job-name={name}', *extra,
             'launch/slurm_gpu.sbatch', *run]
  elif launcher == 'tpu_vm':
    words = ['launch/tpu_vm.sh', 'up', f'--name={name}', *extra, *run]
  else:
    words = ['launch/local.sh', *extra, *run]
  return shlex.join(words)


def train_row(setup: specs.RowSetup, rowdir: str) -> None:
  """Trains and evaluates one row; a failure is recorded, not raised, so
  that the other rows still run."""
  outcomes.clear_failure(rowdir)
  print(f'== Row {setup.row.name} ({setup.row.label}) into {rowdir}',
        flush=True)
  try:
    train.train_and_evaluate(setup.config, rowdir)
  except faults.Preempted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    reason = outcomes.record_failure(rowdir, e)
    print(f'== Row {setup.row.name} failed: {reason}', flush=True)


def train_rows_in_processes(runs: list[tuple[specs.RowSetup, str]],
                            parallel: int) -> None:
  """Trains the rows `parallel` at a time, each in a process of its own
  (`python -m transformer.main`, its output in ROWDIR/reproduce.log):
  small rows side by side on one accelerator, each taking 0.9 / parallel
  of its memory (unless XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise). A
  failed row is recorded as in-process; if a row was preempted (exit 75),
  or this process gets SIGTERM or SIGINT, the running rows are stopped
  (SIGTERM: they checkpoint), no more start, and `Preempted` is raised
  once all have ended."""
  env = dict(os.environ)
  env.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', f'{0.9 / parallel:.3f}')
  pending, running, preempted = list(runs), {}, None
  # A signal to this process (SIGTERM from a scheduler, Ctrl-C) stops the
  # rows as a preemption stops one: each checkpoints, then all exit.
  signalled = []
  previous = {}
  if threading.current_thread() is threading.main_thread():
    for sig in (signal.SIGTERM, signal.SIGINT):
      previous[sig] = signal.signal(
          sig, lambda signum, frame: signalled.append(signum))
  def stop_on_signal():
    nonlocal preempted
    if signalled and preempted is None:
      preempted = f'this command ({signal.Signals(signalled[0]).name})'
      for process in running:
        process.terminate()

  try:
    while pending or running:
      stop_on_signal()
      while pending and len(running) < parallel and preempted is None:
        run, rowdir = pending.pop(0)
        os.makedirs(rowdir, exist_ok=True)
        outcomes.clear_failure(rowdir)
        log_path = os.path.join(rowdir, 'reproduce.log')
        print(f'== Row {run.row.name} ({run.row.label}) into {rowdir}, in a '
              f'process of its own (log: {log_path})', flush=True)
        with open(log_path, 'w') as log:
          # A session of its own: a signal to this command's process group
          # (Ctrl-C, `timeout`, a scheduler) reaches the rows only once,
          # from here; a second SIGTERM would make them exit without a
          # checkpoint (`faults.PreemptionSignals`).
          process = subprocess.Popen(
              [sys.executable, '-m', 'transformer.main', *run.flags(),
               f'--workdir={rowdir}'], stdout=log, stderr=subprocess.STDOUT,
              env=env, start_new_session=True)
        running[process] = (run, rowdir, log_path)
      if preempted is not None:
        pending.clear()
      time.sleep(0.5)
      stop_on_signal()  # before judging the rows a signal may have ended
      for process in [p for p in running if p.poll() is not None]:
        run, rowdir, log_path = running.pop(process)
        if preempted is not None and process.returncode:
          # Stopped by us (or preempted), perhaps before it could
          # checkpoint: unfinished, not failed; a rerun resumes it.
          print(f'== Row {run.row.name} stopped', flush=True)
        elif process.returncode == faults.PREEMPTED_EXIT_CODE:
          if preempted is None:  # the first; the others we stop here
            preempted = run.row.name
            for other in running:
              other.terminate()  # SIGTERM: checkpoint and exit
        elif process.returncode:
          reason = outcomes.record_process_failure(rowdir, log_path,
                                                   process.returncode)
          print(f'== Row {run.row.name} failed: {reason}', flush=True)
        else:
          print(f'== Row {run.row.name} done', flush=True)
  finally:  # an interrupted parent leaves no training behind
    for process in running:
      process.terminate()
    for process in running:
      try:  # a row gets time to write its checkpoint, not forever
        process.wait(timeout=300)
      except subprocess.TimeoutExpired:
        process.kill()
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  if preempted is not None:
    who = preempted if preempted.startswith('this') else f'row {preempted}'
    raise faults.Preempted(
        -1, f'Stopped by a signal to {who}: the rows that were running '
        f'stopped (those that had begun training after writing a '
        f'checkpoint); rerun the same command to resume them.')


def _check_workdir(workdir: str, table: str, scale: str) -> None:
  """One table at one scale per workdir: rows of another would share names
  and be taken for finished."""
  marker = storage.join(workdir, 'reproduce_table.txt')
  here = f'{os.path.basename(table)} scale={scale}'
  if storage.exists(marker):
    there = storage.read_text(marker).strip()
    if there != here:
      raise ValueError(f'--workdir={workdir} holds the rows of {there}, not '
                       f'{here}: choose another --workdir.')
  storage.write_atomically(marker, here + '\n')


def hardware() -> str:
  """The devices this process sees, e.g. 'CPU (2 cores, AMD EPYC ...)'."""
  devices = jax.devices()
  kind = devices[0].device_kind
  if devices[0].platform == 'cpu':
    kind = f'CPU ({os.cpu_count()} cores{_cpu_model()})'
  return f'{len(devices)} x {kind}' if len(devices) > 1 else kind


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      names = [line.split(':', 1)[1].strip() for line in f
               if line.startswith('model name')]
  except OSError:
    names = []
  return f', {names[0]}' if names else ''


def _unrunnable(problem: str) -> outcomes.Outcome:
  """'not expressible: why' -> status 'not expressible', detail 'why'."""
  status, _, detail = problem.partition(': ')
  return outcomes.Outcome(status, detail=detail)


def unrunnable_rows(table: str, scale: str, rows: list[str],
                    extra: str = '') -> list[tuple[str, str, str]]:
  """(row, status, detail) of each selected row of the spec file `table`
  that cannot run at `scale` (invalid, not expressible, not ready), as
  the table shows it; a row the spec gives no equivalent there is not
  among them (`tables.rows_without_result`)."""
  spec = specs.load_spec(table)
  setups = [specs.setup(spec, row, scale, extra)
            for row in specs.select_rows(spec, rows)]
  problems = []
  for setup in setups:
    if setup.problem and setup.problem != specs.no_equivalent(scale):
      unrunnable = _unrunnable(setup.problem)
      problems.append((setup.row.name, unrunnable.status, unrunnable.detail))
  return problems


def reproduce(table: str, workdir: str, *, scale: str, rows: list[str],
              launch: str, extra: str = '', launcher: str = 'slurm_gpu',
              launcher_args: str = '', command: str = '',
              seeds: int | None = None, parallel: int = 1) -> str:
  """Runs (launch='local'), prints the launch commands of (launch='print')
  or only collects (launch='collect') the selected rows of the spec file
  `table`; returns the table text (written to WORKDIR/table.md and .csv),
  or the printed commands.

  Args:
    table: the spec file.
    workdir: each row trains into WORKDIR/ROW.
    scale: a key of the spec's SCALES.
    rows: groups or row names; all rows if empty.
    launch: one of LAUNCHES.
    extra: 'a.b=v,...' overrides for every row (stated in the table).
    launcher, launcher_args: the launch/ script of launch='print' (one of
      LAUNCHERS) and words for it.
    command: the command line, for the table's header.
    seeds: runs per row (`specs.seed_runs`); None: the scale's.
    parallel: launch='local' with more than 1 trains that many rows at a
      time, each in a process of its own (`train_rows_in_processes`).
  """
  if launch not in LAUNCHES or launcher not in LAUNCHERS:  # as the flags
    raise ValueError(f'launch={launch!r}, launcher={launcher!r}; choose '
                     f'from {LAUNCHES} and {LAUNCHERS}.')
  spec = specs.load_spec(table)
  if scale in spec.SCALES:
    seeds = seeds or spec.SCALES[scale].seeds
  if seeds is not None and seeds < 1:
    raise ValueError(f'--seeds={seeds}: a row needs at least one run.')
  if parallel < 1 or (parallel > 1 and launch != 'local'):
    raise ValueError(f'--parallel={parallel}: rows train side by side only '
                     f'with --launch=local, at least 1 at a time.')
  selected = specs.select_rows(spec, rows)
  setups = [specs.setup(spec, row, scale, extra) for row in selected]
  # A bucket (gs://...) can take the cluster's runs but is read here only
  # through a mount.
  remote = '://' in workdir
  if remote and launch != 'print':
    raise ValueError(f'--workdir={workdir} is a URL: only --launch=print '
                     f'takes one. To collect, mount the bucket (gcsfuse '
                     f'--implicit-dirs BUCKET /gcs/BUCKET) and pass '
                     f'--workdir=/gcs/BUCKET/...')
  if not remote:
    _check_workdir(workdir, table, scale)
  prefix = os.path.splitext(os.path.basename(table))[0]
  lines = []  # launch='print': the commands, and why a row has none
  in_processes = []  # launch='local' with parallel > 1: (run, rowdir)
  for setup in setups:
    for name, run in specs.seed_runs(setup, seeds):
      rowdir = storage.join(workdir, name)
      if run.problem:
        lines.append(f'# {name}: {run.problem}')
      elif (not remote and outcomes.outcome(rowdir, run.config).status
            == 'finished'):
        lines.append(f'# {name}: finished, not run again (results in '
                     f'{rowdir})')
      elif launch == 'print':
        lines.append(launch_command(run, rowdir, launcher=launcher,
                                    launcher_args=launcher_args,
                                    prefix=prefix))
      elif launch == 'local' and parallel > 1:
        in_processes.append((run, rowdir))
      elif launch == 'local':
        train_row(run, rowdir)
      if launch != 'print' and lines:
        print(lines.pop(), flush=True)
  if in_processes:
    train_rows_in_processes(in_processes, parallel)
  if launch == 'print':
    return '\n'.join(lines)
  results = [[outcomes.outcome(storage.join(workdir, name), run.config)
              for name, run in specs.seed_runs(s, seeds)]
             if not s.problem else [_unrunnable(s.problem)] for s in setups]
  about = (f'Produced by `{command or "transformer.tools.reproduce"}` on '
           f'{hardware()}, {datetime.date.today().isoformat()}.')
  return tables.write(spec, scale, setups, results, workdir, extra=extra,
                      about=about, seeds=seeds)
