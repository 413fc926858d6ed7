"""Where a row's run stands, read from its workdir without training or
evaluating: its final evaluation (TensorBoard events), its progress, and a
failure note left by `reproduce.rows`. The same reading serves runs made
here and runs a cluster made into a shared workdir.
"""

from __future__ import annotations

import dataclasses
import re
import traceback

import ml_collections

from transformer import errors
from transformer import metrics
from transformer import storage
from transformer import workdir as workdir_lib

FAILURE_NOTE = 'reproduce_failure.txt'


@dataclasses.dataclass(frozen=True)
class Outcome:
  """status: 'finished', 'failed', 'unfinished' (running, or stopped
  part-way), 'not run' or 'changed' (finished with another config);
  metrics: the final evaluation's scalars ({'eval/bleu': ...}); detail: for
  the table."""
  status: str
  metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  step: int = 0
  seconds: float = 0.0
  detail: str = ''


def outcome(workdir: str, config: ml_collections.ConfigDict) -> Outcome:
  """Where the run of `config` in `workdir` stands. Finished means: trained
  to config.train.num_steps, evaluated there (and evaluated averaged, when
  the config averages checkpoints), with the same config."""
  steps = config.train.num_steps
  progress = workdir_lib.load_progress(workdir)
  try:
    scalars = metrics.read_scalars(workdir)
  except metrics.DamagedEventFile as e:  # this row's, not the table's
    return Outcome('failed', step=int(progress.get('step', 0)),
                   detail=str(e).split('\n', 1)[0])
  final = {tag: values[steps] for tag, values in scalars.items()
           if steps in values and tag.startswith(('eval/', 'eval_averaged/'))}
  step, seconds = int(progress.get('step', 0)), progress.get('train_seconds',
                                                              0.0)
  needed = ['eval/loss'] + (['eval_averaged/loss']
                            if config.eval.average_checkpoints > 1 else [])
  if step >= steps and all(tag in final for tag in needed):
    changes = workdir_lib.config_changes(workdir, config)
    if changes:
      return Outcome('changed', final, step, seconds,
                     'finished with another config: ' + ', '.join(changes))
    return Outcome('finished', final, step, seconds)
  note = storage.path(workdir) / FAILURE_NOTE
  if note.exists():
    reason = note.read_text().split('\n', 1)[0].strip()
    return Outcome('failed', final, step, seconds, reason)
  # Running, or stopped (preempted, killed): the workdir cannot tell.
  if step:
    return Outcome('unfinished', final, step, seconds,
                   f'trained to step {step:,} of {steps:,}')
  if (storage.path(workdir) / workdir_lib.CONFIG_FILE).exists():
    return Outcome('unfinished', detail='started, no checkpoint yet')
  return Outcome('not run')


def record_failure(workdir: str, error: BaseException) -> str:
  """Leaves the error (first line: type and message; then the traceback)
  in the workdir; returns the first line."""
  reason = errors.first_line(f'{type(error).__name__}: {error}', None)
  storage.write_atomically(
      storage.join(workdir, FAILURE_NOTE),
      reason + '\n\n' + ''.join(traceback.format_exception(error)))
  return reason


_EXCEPTION_LINE = re.compile(r'(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.*)')


def record_process_failure(workdir: str, log_path: str,
                           returncode: int) -> str:
  """As `record_failure`, for a row trained in a process of its own: the
  reason is the command's error message with its exit status, else the
  last line of a traceback in its log ('Type: message', as in-process),
  else the exit status alone."""
  with open(log_path, errors='replace') as f:
    lines = f.read().splitlines()
  # A traceback's 'pkg.module.SomeError: message' -> 'SomeError: message';
  # the commands' own 'Error: message' (tools/cli.py) -> 'exit status N:
  # message'.
  errors = [m for m in map(_EXCEPTION_LINE.fullmatch, lines) if m]
  said = [l[len('Error: '):] for l in lines if l.startswith('Error: ')]
  if said:
    reason = f'exit status {returncode}: {said[-1]}'
  elif errors:
    reason = f'{errors[-1][1]}: {errors[-1][2]}'
  else:
    reason = f'exit status {returncode} (log: {log_path})'

  storage.write_atomically(storage.join(workdir, FAILURE_NOTE),
                           reason + '\n\n' + '\n'.join(lines[-40:]) + '\n')
  return reason


def clear_failure(workdir: str) -> None:
  (storage.path(workdir) / FAILURE_NOTE).unlink(missing_ok=True)
