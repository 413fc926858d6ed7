"""Orbax checkpoints of the train state: saving, restoring the latest one
that really restores (resume), averaging, and warm starts.

A checkpoint holds two items, 'params' and 'opt_state', under
`workdir/checkpoints/<step>`. The data position is the step itself: the
input pipelines are deterministic functions of (seed, step).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any, Iterator, Sequence

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import orbax.checkpoint as ocp

ITEMS = ('params', 'opt_state')


def directory(workdir: str) -> str:
  return os.path.join(os.path.abspath(workdir), 'checkpoints')


def exist(workdir: str) -> bool:
  """Whether the workdir holds at least one finished checkpoint."""
  folder = directory(workdir)
  return os.path.isdir(folder) and any(name.isdigit()
                                       for name in os.listdir(folder))


def manager(workdir: str, *, max_to_keep: int | None = None,
            read_only: bool = False) -> ocp.CheckpointManager:
  """Checkpoint manager of a workdir; writes asynchronously."""
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=not read_only, read_only=read_only,
      enable_async_checkpointing=not read_only)
  # Orbax writes each checkpoint into a temporary folder and renames it
  # when every process has finished: an interrupted write is never listed.
  return ocp.CheckpointManager(
      directory(workdir), options=options,
      item_handlers={name: ocp.StandardCheckpointHandler()
                     for name in ITEMS})


@contextlib.contextmanager
def finish_writes_on_error(mngr: ocp.CheckpointManager) -> Iterator[None]:
  """If training stops with an error, the asynchronous writes of the
  checkpoints already saved (all of good states) still complete."""
  try:
    yield
  except BaseException:
    mngr.wait_until_finished()
    raise


def param_shapes(mngr: ocp.CheckpointManager, step: int
                 ) -> dict[str, tuple[int, ...]]:
  """{parameter path: shape} of a checkpoint, from its metadata."""
  params = mngr.item_metadata(step)['params']
  return {jax.tree_util.keystr(path): tuple(leaf.shape) for path, leaf in
          jax.tree_util.tree_flatten_with_path(
              params, is_leaf=lambda x: hasattr(x, 'shape'))[0]}


def set_aside(workdir: str, step: int) -> str:
  """Moves checkpoint `step` to workdir/unreadable_checkpoints/ (process 0;
  the others wait), so that training past that step can save it again."""
  target = os.path.join(os.path.abspath(workdir), 'unreadable_checkpoints',
                        str(step))
  if jax.process_index() == 0:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.exists(target):
      shutil.rmtree(target)
    os.rename(os.path.join(directory(workdir), str(step)), target)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'set aside checkpoint {step}')
  return target


def save(mngr: ocp.CheckpointManager, step: int, params: Any,
         opt_state: Any) -> None:
  mngr.save(step, args=ocp.args.Composite(
      params=ocp.args.StandardSave(params),
      opt_state=ocp.args.StandardSave(opt_state)))


def restore(mngr: ocp.CheckpointManager, step: int, abstract: dict[str, Any]
           ) -> dict[str, Any]:
  """Restores the items named in `abstract` (name -> tree of
  ShapeDtypeStruct with shardings) onto their shardings."""
  restored = mngr.restore(step, args=ocp.args.Composite(**{
      name: ocp.args.StandardRestore(tree) for name, tree in abstract.items()
  }))
  return {name: restored[name] for name in abstract}


def averaged_params(mngr: ocp.CheckpointManager, abstract_params: Any,
                    count: int) -> tuple[Any, Sequence[int]]:
  """Mean of the parameters of the last `count` checkpoints (paper: 5 for
  base, 20 for big models; checkpoints written every 10 minutes there).

  Returns:
    The averaged parameters and the steps averaged.
  """
  steps = sorted(mngr.all_steps())[-count:]
  if not steps:
    raise FileNotFoundError(f'No checkpoints in {mngr.directory}.')
  if len(steps) < count:
    logging.warning('Averaging %d checkpoints; %d were asked for.',
                    len(steps), count)
  total = None
  for step in steps:
    params = restore(mngr, step, {'params': abstract_params})['params']
    params = jax.tree.map(lambda a: a.astype(jnp.float32), params)
    total = params if total is None else jax.tree.map(jnp.add, total, params)
  return jax.tree.map(
      lambda t, a: (t / len(steps)).astype(a.dtype), total,
      abstract_params), steps


def restore_params(workdir: str, abstract_params: Any, average: int = 1
                   ) -> tuple[Any, int]:
  """The latest parameters of a workdir (or the mean of its last `average`
  checkpoints) onto the shardings of `abstract_params`, and the step."""
  mngr = manager(workdir, read_only=True)
  step = mngr.latest_step()
  if step is None:
    raise FileNotFoundError(
        f'No checkpoint in {directory(workdir)}; train first: python -m '
        f'transformer.main --workdir={workdir}')
  if average > 1:
    params, _ = averaged_params(mngr, abstract_params, average)
  else:
    params = restore(mngr, step, {'params': abstract_params})['params']
  mngr.close()
  return params, step


# -- Resuming -----------------------------------------------------------------


class IncompatibleCheckpoint(ValueError):
  """The workdir's checkpoints belong to another model or vocabulary."""


def incompatible(changes: dict[str, tuple[Any, Any]], reason: str
                 ) -> IncompatibleCheckpoint:
  """The refusal to resume, listing the config fields that changed."""
  listed = '; '.join(f'{field}: {old!r} -> {new!r}'
                     for field, (old, new) in changes.items())
  return IncompatibleCheckpoint(
      f'This workdir holds checkpoints of another model: {reason}. '
      f'Changed fields: {listed or "none"}. Restore those values, or train '
      f'into a new --workdir (with --config.train.init_from=OLD_WORKDIR to '
      f'start from its parameters).')


def check_shapes(mngr: ocp.CheckpointManager, step: int,
                 abstract_params: Any, changes: dict[str, tuple[Any, Any]]
                 ) -> None:
  """Refuses a checkpoint whose parameters differ in names or shapes from
  the model of the config, listing the config fields that changed."""
  saved = param_shapes(mngr, step)
  wanted = {jax.tree_util.keystr(path): tuple(leaf.shape) for path, leaf in
            jax.tree_util.tree_flatten_with_path(abstract_params)[0]}
  if saved == wanted:
    return
  differing = sorted(name for name in set(saved) | set(wanted)
                     if saved.get(name) != wanted.get(name))
  shown = ', '.join(f'{name} {saved.get(name)} -> {wanted.get(name)}'
                    for name in differing[:6])
  more = f' and {len(differing) - 6} more' if len(differing) > 6 else ''
  raise incompatible(
      {f: c for f, c in changes.items() if f.startswith(('model.', 'data.'))},
      f'checkpoint {step} has parameters of other names or shapes '
      f'({shown}{more})')


def restore_latest(workdir: str, mngr: ocp.CheckpointManager,
                   abstract: dict[str, Any],
                   changes: dict[str, tuple[Any, Any]]
                   ) -> tuple[dict[str, Any] | None, int]:
  """The items of the latest checkpoint that restores, and its step
  ((None, 0) when there is none).

  A checkpoint that cannot be read (truncated or missing files) is reported
  and the one before it is tried; once one restores, the unreadable newer
  ones are set aside under workdir/unreadable_checkpoints/ (so the run can
  save those steps again). If none restores, nothing is moved. A checkpoint
  of another model is refused (`check_shapes`; `changes` are the config
  fields that changed since, for the message).
  """
  failures = []
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      try:
        param_shapes(mngr, step)
      except Exception:  # pylint: disable=broad-except
        pass  # unreadable metadata: the restore below says why
      else:
        check_shapes(mngr, step, abstract['params'], changes)
      restored = restore(mngr, step, abstract)
    except IncompatibleCheckpoint:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # Orbax and TensorStore raise plain Exceptions for damaged files.
      reason = str(e).strip().splitlines()[0][:300] if str(e) else repr(e)
      print(f'Checkpoint {step} cannot be restored: {reason}', flush=True)
      failures.append((step, e))
      continue
    for failed, _ in failures:
      target = set_aside(workdir, failed)
      print(f'Moved unreadable checkpoint {failed} to {target}; resuming '
            f'from checkpoint {step}.', flush=True)
    if failures:
      mngr.reload()
    return restored, step
  if failures:
    raise RuntimeError(
        f'No checkpoint in {directory(workdir)} could be restored (steps '
        f'{[s for s, _ in failures]}). Fix the storage, or start a new '
        f'--workdir.') from failures[0][1]
  return None, 0


# -- Warm starts --------------------------------------------------------------


def warm_start(params: Any, loaded: Any, *, source: str, step: int) -> Any:
  """`params` with every array that `loaded` (the parameters of workdir
  `source` at `step`, as the task adapted them) has at the same path and
  shape, e.g. a pretrained encoder under a new head."""
  flat_loaded = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
  copied, new, mismatched = [], [], []

  def pick(path, value):
    name = jax.tree_util.keystr(path)
    if path not in flat_loaded:
      new.append(name)
      return value
    if flat_loaded[path].shape != value.shape:
      mismatched.append(f'{name} {flat_loaded[path].shape} != {value.shape}')
      return value
    copied.append(name)
    return jax.device_put(flat_loaded[path].astype(value.dtype),
                          value.sharding)

  params = jax.tree_util.tree_map_with_path(pick, params)
  if mismatched:
    raise ValueError(f'{source} (step {step}) has parameters of other shapes '
                     f'(different vocabulary or sizes?): {mismatched}')
  if not copied:
    raise ValueError(f'{source} (step {step}) shares no parameter with this '
                     f'model: it is not a checkpoint of the same architecture.')
  unused = sorted(set(map(jax.tree_util.keystr, flat_loaded)) - set(copied))
  print(f'Initialised {len(copied)} parameter arrays from {source} (step '
        f'{step}); newly initialised: {new or "none"}; not used: '
        f'{unused or "none"}', flush=True)
  return params
