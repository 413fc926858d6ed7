"""Orbax checkpoints of the train state, resume, and checkpoint averaging.

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
