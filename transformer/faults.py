"""Faults during training: preemption signals and non-finite values.

Preemption: SIGTERM or SIGINT asks the loop to finish its step, write a
checkpoint, wait for it, and exit with PREEMPTED_EXIT_CODE; a second signal
exits at once. An evaluation under way is stopped at once
(`PreemptionSignals.interrupting`): it may take longer than the grace
period, and the rerun evaluates again. Several processes agree on the step through orbax's
preemption sync point (the JAX coordination service sees the signal), so
they all save the same step.

Non-finite values: every step checks its loss, gradient norm and new
parameters on device. The host reads that flag one step late (it never
waits for the step it just dispatched), and before each log line,
checkpoint and evaluation, and applies `config.train.nonfinite`: 'stop'
ends the run with a report before the step is logged or its state
evaluated or saved, the last checkpoint untouched; 'skip' never applies
such a step (the device keeps the old state), counts skipped steps and
stops after `config.train.max_consecutive_skips` in a row.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Callable, Iterator

import jax
import numpy as np

PREEMPTED_EXIT_CODE = 75  # sysexits' EX_TEMPFAIL: rerun to resume
POLICIES = ('stop', 'skip')


class Preempted(Exception):
  """Training stopped on a signal after checkpointing `step`."""

  def __init__(self, step: int, message: str | None = None):
    super().__init__(message or f'Preempted at step {step}: the checkpoint '
                     f'is written; rerun the same command to resume.')
    self.step = step


class Interrupted(BaseException):
  """A signal stopped work that `PreemptionSignals.interrupting` guards (a
  BaseException, as KeyboardInterrupt: no `except Exception` swallows
  it)."""


def _say(text: str) -> None:
  print(text, flush=True)


class PreemptionSignals:
  """While active, SIGTERM and SIGINT request a checkpoint-and-exit.

  In a multi-process run the handlers are left to the JAX coordination
  service, whose preemption notice `stop_requested` reads.
  """

  def __init__(self, say: Callable[[str], None] = _say):
    self.signal = None
    self._previous = {}
    self._interrupting = False
    self._say = say  # what prints its words (below a progress line)

  @contextlib.contextmanager
  def interrupting(self) -> Iterator[None]:
    """Work with no state to save (an evaluation), which a signal, or one
    received before it began, stops at once with `Interrupted`."""
    if self.signal is not None:
      raise Interrupted()
    self._interrupting = True
    try:
      yield
    finally:
      self._interrupting = False

  def __enter__(self) -> PreemptionSignals:
    if (jax.process_count() == 1
        and threading.current_thread() is threading.main_thread()):
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}

  def _handle(self, signum, frame) -> None:
    del frame
    name = signal.Signals(signum).name
    if self.signal is not None:
      self._say(f'Second signal ({name}): exiting now, without a '
                f'checkpoint.')
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.signal = signum
    if self._interrupting:
      self._interrupting = False
      self._say(f'{name} received: stopping the evaluation (send it again '
                f'to exit at once).')
      raise Interrupted()
    self._say(f'{name} received: finishing this step and writing a '
              f'checkpoint (send it again to exit at once).')

  def stop_requested(self, mngr, step: int) -> bool:
    if jax.process_count() > 1:
      return mngr.reached_preemption(step)
    return self.signal is not None


class NonFiniteError(FloatingPointError):
  """A step produced a non-finite loss, gradient or parameters."""


def health(loss_sums: tuple[jax.Array, jax.Array], grad_squares: Any,
           params_finite: jax.Array, grad_norm: jax.Array) -> dict[str, Any]:
  """On device: whether the step is finite; for the report, its loss sums
  (before the step's metrics are zeroed), whether the new parameters are
  finite, and which gradients are not (from each gradient's sum of
  squares, non-finite when the gradient is)."""
  return {'finite': (jax.numpy.isfinite(loss_sums[0])
                     & jax.numpy.isfinite(grad_norm) & params_finite),
          'loss': loss_sums, 'params_finite': params_finite,
          'nonfinite_grads': jax.tree.map(
              lambda s: ~jax.numpy.isfinite(s), grad_squares)}


def _batch_statistics(batch: dict[str, np.ndarray]) -> str:
  parts = []
  for key, value in sorted(batch.items()):
    value = np.asarray(value)
    if value.dtype.kind in 'iub':
      parts.append(f'{key} {value.shape} nonzero {int(np.count_nonzero(value))}'
                   f' range [{value.min()}, {value.max()}]')
    else:
      finite = np.isfinite(value)
      parts.append(f'{key} {value.shape} range [{np.nanmin(value):.4g}, '
                   f'{np.nanmax(value):.4g}] non-finite '
                   f'{int(value.size - finite.sum())}')
  return '; '.join(parts)


class NonFiniteMonitor:
  """The host side of the check, one step behind the device."""

  def __init__(self, policy: str, max_consecutive: int, workdir: str, *,
               say: Callable[[str], None] = _say):
    if policy not in POLICIES:
      raise ValueError(f'config.train.nonfinite={policy!r}; choose one of '
                       f'{POLICIES}.')
    self.policy, self.max_consecutive = policy, max_consecutive
    self.workdir, self._say = workdir, say
    self.consecutive = self.skipped = 0
    self._pending = None

  def check(self, step: int, step_health: dict[str, Any],
            batch: dict[str, Any]) -> None:
    """Records this step's health and judges the previous step's."""
    pending, self._pending = self._pending, (step, step_health, batch)
    if pending is not None:
      self._judge(*pending)

  def flush(self) -> None:
    """Judges the last step (before checkpoints, logs and evaluations)."""
    pending, self._pending = self._pending, None
    if pending is not None:
      self._judge(*pending)

  def _judge(self, step, step_health, batch) -> None:
    if bool(jax.device_get(step_health['finite'])):
      self.consecutive = 0
      return
    self.skipped += 1
    self.consecutive += 1
    (loss_sum, count), params_finite, flags = jax.device_get((
        step_health['loss'], step_health['params_finite'],
        step_health['nonfinite_grads']))
    names = [jax.tree_util.keystr(path) for path, bad in
             jax.tree_util.tree_flatten_with_path(flags)[0] if bad]
    causes = ([] if np.isfinite(loss_sum) else ['loss']) + (
        [f'gradients of {len(names)} parameters'] if names else []) + (
            [] if params_finite else ['new parameters'])
    cause = ', '.join(causes) or 'gradient norm'
    if self.policy == 'skip' and self.consecutive <= self.max_consecutive:
      self._say(f'Step {step}: non-finite {cause}; update skipped '
                f'({self.skipped} skipped so far, {self.consecutive} in a '
                f'row).')
      return
    if self.policy == 'skip':
      why = (f'{self.consecutive} steps in a row, over '
             f'config.train.max_consecutive_skips={self.max_consecutive}')
      other = ('raise config.train.max_consecutive_skips to skip more in a '
               'row')
    else:
      why = 'config.train.nonfinite=\'stop\''
      other = 'config.train.nonfinite=\'skip\' skips such steps'
    raise NonFiniteError(
        f'Step {step} produced non-finite values ({why}): {cause}. No state '
        f'of that step was evaluated or saved, and the last checkpoint in '
        f'{self.workdir}/checkpoints is untouched. Loss sum {float(loss_sum)}'
        f' over {float(count):g} targets. Parameters with non-finite '
        f'gradients ({len(names)}): {", ".join(names[:10]) or "none"}'
        f'{" ..." if len(names) > 10 else ""}. Batch: '
        f'{_batch_statistics(jax.device_get(batch))}. Lower '
        f'config.optimizer.learning_rate, set config.optimizer.grad_clip_norm,'
        f' or check the data of this step; {other}.')
