"""Starting a run in a workdir that may hold an earlier run: a writable
workdir, what changed in the config, and the latest checkpoint that can
really be restored.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections

from transformer import checkpoints

# Settings whose change makes old checkpoints mean something else even when
# every parameter keeps its shape: the task and the token ids.
REFUSED_CHANGES = ('task', 'data.tokenizer', 'data.tokenizer_model_type',
                   'data.vocab_size')


def check_writable(workdir: str) -> None:
  """Refuses, before anything is built, a workdir this process cannot
  write (permissions, read-only or full filesystem)."""
  probe = os.path.join(workdir, f'.write_test_{jax.process_index()}')
  try:
    os.makedirs(workdir, exist_ok=True)
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise OSError(f'Cannot write to the workdir {workdir}: {e.strerror}. '
                  f'Fix its permissions or free space, or choose another '
                  f'--workdir.') from e


def _flat(tree: dict[str, Any], prefix: str = '') -> dict[str, Any]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def config_changes(workdir: str, config: ml_collections.ConfigDict
                   ) -> dict[str, tuple[Any, Any]]:
  """Fields whose value differs from the config.json of the workdir:
  {field: (saved, now)}; empty for a new workdir."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    saved = _flat(json.load(f))
  now = _flat(json.loads(config.to_json_best_effort()))
  return {field: (saved.get(field), now.get(field))
          for field in sorted(set(saved) | set(now))
          if saved.get(field) != now.get(field)}


class IncompatibleCheckpoint(ValueError):
  """The workdir's checkpoints belong to another model or vocabulary."""


def _refusal(changes: dict[str, tuple[Any, Any]], reason: str
             ) -> IncompatibleCheckpoint:
  listed = '; '.join(f'{field}: {old!r} -> {new!r}'
                     for field, (old, new) in changes.items())
  return IncompatibleCheckpoint(
      f'This workdir holds checkpoints of another model: {reason}. '
      f'Changed fields: {listed or "none"}. Restore those values, or train '
      f'into a new --workdir (with --config.train.init_from=OLD_WORKDIR to '
      f'start from its parameters).')


def check_config_change(changes: dict[str, tuple[Any, Any]]) -> None:
  """Refuses changes no checkpoint survives; reports the others, which the
  resumed run applies (learning rate, steps, evaluation, mesh, ...)."""
  refused = {f: c for f, c in changes.items()
             if f in REFUSED_CHANGES}
  if refused:
    raise _refusal(refused, 'the task or the vocabulary changed')
  if changes:
    print('Resuming with config changes: ' + '; '.join(
        f'{field} {old!r} -> {new!r}'
        for field, (old, new) in changes.items()), flush=True)


def check_shapes(mngr, step: int, abstract_params: Any,
                 changes: dict[str, tuple[Any, Any]]) -> None:
  """Refuses a checkpoint whose parameters differ in names or shapes from
  the model of the config, listing the config fields that changed."""
  saved = checkpoints.param_shapes(mngr, step)
  wanted = {jax.tree_util.keystr(path): tuple(leaf.shape) for path, leaf in
            jax.tree_util.tree_flatten_with_path(abstract_params)[0]}
  if saved == wanted:
    return
  differing = sorted(name for name in set(saved) | set(wanted)
                     if saved.get(name) != wanted.get(name))
  shown = ', '.join(f'{name} {saved.get(name)} -> {wanted.get(name)}'
                    for name in differing[:6])
  more = f' and {len(differing) - 6} more' if len(differing) > 6 else ''
  raise _refusal(
      {f: c for f, c in changes.items() if f.startswith(('model.', 'data.'))},
      f'checkpoint {step} has parameters of other names or shapes '
      f'({shown}{more})')


def restore_latest(workdir: str, mngr, abstract: dict[str, Any],
                   changes: dict[str, tuple[Any, Any]]
                   ) -> tuple[dict[str, Any] | None, int]:
  """The items of the latest checkpoint that restores, and its step
  ((None, 0) when there is none).

  A checkpoint that cannot be read (truncated or missing files) is reported
  and the one before it is tried; once one restores, the unreadable newer
  ones are set aside under workdir/unreadable_checkpoints/ (so the run can
  save those steps again). If none restores, nothing is moved. A checkpoint
  of another model is refused (`check_shapes`).
  """
  failures = []
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      try:
        checkpoints.param_shapes(mngr, step)
      except Exception:  # pylint: disable=broad-except
        pass  # unreadable metadata: the restore below says why
      else:
        check_shapes(mngr, step, abstract['params'], changes)
      restored = checkpoints.restore(mngr, step, abstract)
    except IncompatibleCheckpoint:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # Orbax and TensorStore raise plain Exceptions for damaged files.
      reason = str(e).strip().splitlines()[0][:300] if str(e) else repr(e)
      print(f'Checkpoint {step} cannot be restored: {reason}', flush=True)
      failures.append((step, e))
      continue
    for failed, _ in failures:
      target = checkpoints.set_aside(workdir, failed)
      print(f'Moved unreadable checkpoint {failed} to {target}; resuming '
            f'from checkpoint {step}.', flush=True)
    if failures:
      mngr.reload()
    return restored, step
  if failures:
    raise RuntimeError(
        f'No checkpoint in {checkpoints.directory(workdir)} could be '
        f'restored (steps {[s for s, _ in failures]}). Fix the storage, or '
        f'start a new --workdir.') from failures[0][1]
  return None, 0
