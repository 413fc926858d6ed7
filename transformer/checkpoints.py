"""Orbax checkpoints of the train state: saving, restoring the latest one
that really restores (resume), averaging, and warm starts.

A checkpoint holds three items under `workdir/checkpoints/<step>`: 'params',
'opt_state' and 'progress' (the training seconds and units counted up to
that step), and `checksums.json`, a digest of every file, written by the
save itself once its data is complete and before the folder is renamed into
place (so no finished checkpoint lacks it), and verified on restore. The
data position is the step itself: the input pipelines are deterministic
functions of (seed, step).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
from typing import Any, Iterator, Sequence

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import orbax.checkpoint as ocp

from transformer import errors
from transformer import storage

ITEMS = ('params', 'opt_state')
PROGRESS = 'progress'
CHECKSUMS = 'checksums.json'
# What orbax writes into a step folder after the checksums (its commit time
# and mark): left out of them.
_WRITTEN_AFTER_CHECKSUMS = ('_CHECKPOINT_METADATA', 'commit_success.txt')
_UNFINISHED = '.orbax-checkpoint-tmp'  # orbax's suffix of a write under way


def directory(workdir: str) -> str:
  return os.fspath(storage.path(workdir) / 'checkpoints')


def exist(workdir: str) -> bool:
  """Whether the workdir holds at least one finished checkpoint."""
  folder = directory(workdir)
  return any(name.isdigit() for name in storage.listdir(folder))


class WriteFailed(OSError):
  """A checkpoint could not be written (full disk, lost permissions, the
  folder replaced): the run stops, its last complete checkpoint intact."""


class Manager(ocp.CheckpointManager):
  """Orbax's manager, with asynchronous write failures made plain.

  Each save records its checksums before orbax commits it (renames its
  temporary folder): a checkpoint is complete with them or not at all. A
  write that fails in orbax's background threads surfaces at the next
  save, at `raise_write_errors` (each log step) or at the final wait, as one
  `WriteFailed` naming the step that failed, the cause and the last complete
  checkpoint, and its temporary folder is removed.

  Orbax creates a save's folders in the calling thread here, not in one
  of its own: with them created asynchronously, a write that fails leaves
  orbax's other threads waiting 5 minutes for the signal that the folders
  exist, which holds the process at exit
  (test_failed_write_ends_the_process_promptly).
  """

  def __init__(self, directory: str, *, options, item_handlers):
    if options.enable_async_checkpointing:
      options = dataclasses.replace(options, async_options=ocp.AsyncOptions(
          post_finalization_callback=self._record_checksums,
          create_directories_asynchronously=False))
    self._writing: int | None = None  # the step of the save under way
    super().__init__(directory, options=options, item_handlers=item_handlers)
    self._pending: int | None = None  # the step being written
    self._failed = False
    self._identity = _identity(directory)  # to tell it was replaced

  def save(self, step: int, *args, **kwargs) -> bool:
    self.wait_until_finished()  # the previous write's failure is its own
    self._writing = step
    try:
      saved = super().save(step, *args, **kwargs)
    except WriteFailed:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise self._write_failed(step, e) from e
    self._pending = step
    return saved

  def _record_checksums(self) -> None:
    """Called by orbax (process 0, once every process has written its part
    and the items are final) just before it commits the step folder."""
    step, folder = self._writing, os.fspath(self.directory)
    # The temporary folder where orbax renames on commit; the step folder
    # itself where it marks completion with a file (cloud storage).
    names = [name for name in storage.listdir(folder)
             if name == str(step) or name.startswith(f'{step}{_UNFINISHED}')]
    if len(names) != 1:
      raise OSError(f'The folder of checkpoint {step} in {folder} is not '
                    f'there to record its checksums (found {names}).')
    record_checksums(storage.join(folder, names[0]))

  def wait_until_finished(self) -> None:
    if self._failed:  # orbax would raise the same failure again
      return
    step, self._pending = self._pending, None
    try:
      super().wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      raise self._write_failed(step, e) from e

  def raise_write_errors(self) -> None:
    """Raises `WriteFailed` if a write in progress has already failed."""
    if self._failed or self._pending is None:
      return
    try:
      self.check_for_errors()
    except Exception:  # pylint: disable=broad-except
      self.wait_until_finished()  # raises it with its step
      raise

  def _write_failed(self, step: int | None, error: Exception) -> WriteFailed:
    self._failed = True
    # Orbax's other threads of this write end first, or they would go on
    # writing into the folder removed below.
    with contextlib.suppress(Exception):
      super().wait_until_finished()
    folder = os.fspath(self.directory)
    if _identity(folder) != self._identity:
      # Orbax's own words would then be about its metadata ("No
      # ArrayMetadata found ...") or a temporary folder.
      said = _os_cause(error)
      return WriteFailed(
          f'Writing checkpoint {step} into {folder} failed: the checkpoint '
          f'folder {folder} disappeared or was replaced while the run wrote '
          f'into it (moved, deleted, or a file or another folder put in its '
          f'place{f": {said}" if said else ""}). The run stopped; the '
          f'checkpoints it held went with that folder. Put it back where it '
          f'was and rerun to resume.')
    if jax.process_index() == 0 and step is not None:
      self._remove_unfinished(step)
    complete = [int(name) for name in storage.listdir(folder)
                if name.isdigit() and int(name) != step]
    last = (f'checkpoint {max(complete)} is intact: rerun to resume from it'
            if complete else 'no checkpoint was completed before')
    return WriteFailed(
        f'Writing checkpoint {step} into {folder} failed: '
        f'{_cause(error)}. The run stopped; {last}. Free space or fix the '
        f'storage first.')

  def _remove_unfinished(self, step: int, grace: float = 5.0) -> None:
    """Removes the temporary folder of the failed write of `step`. Orbax
    writes a step's metadata from a thread of its own, which can still put a
    file there while the folder goes (the removal then fails: "directory not
    empty"), so the removal is retried until a listing finds it gone."""
    deadline = time.monotonic() + grace
    while True:
      left = [name for name in storage.listdir(os.fspath(self.directory))
              if name.startswith(f'{step}{_UNFINISHED}')]
      for name in left:
        with contextlib.suppress(OSError):
          (self.directory / name).rmtree()
      if not left or time.monotonic() > deadline:
        return
      time.sleep(0.05)


def _identity(folder: Any) -> tuple[int, int] | bool:
  """What tells a folder from one put in its place: its device and inode
  where local; on cloud storage whether it is there."""
  folder = os.fspath(folder)
  if storage.is_remote(folder):
    return storage.path(folder).is_dir()
  try:
    stat = os.stat(folder)
  except OSError:
    return False
  return (stat.st_dev, stat.st_ino) if os.path.isdir(folder) else False


def _os_cause(error: BaseException) -> str | None:
  """The OS error of a failed write in words ('No space left on device'),
  where one is in the chain or in TensorStore's text ("...
  [os_error_code='28']")."""
  seen = error
  while seen is not None:
    code = seen.errno if isinstance(seen, OSError) else None
    match = re.search(r"os_error_code='(\d+)'|\[Errno (\d+)\]", str(seen))
    if code or match:
      return os.strerror(code or int(match.group(1) or match.group(2)))
    seen = seen.__cause__ or seen.__context__
  return None


def _cause(error: BaseException) -> str:
  """The root cause of a failed write, in words: the OS error, else the
  first line."""
  return _os_cause(error) or errors.first_line(error)


def manager(workdir: str, *, max_to_keep: int | None = None,
            read_only: bool = False) -> Manager:
  """Checkpoint manager of a workdir; writes asynchronously."""
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=not read_only, read_only=read_only,
      enable_async_checkpointing=not read_only,
      # What a killed or failed write left (its temporary folder) would
      # take the name of that step's next write, and disk space.
      cleanup_tmp_directories=not read_only)
  # Orbax writes each checkpoint into a temporary folder and renames it
  # when every process has finished: an interrupted write is never listed.
  handlers = {name: ocp.StandardCheckpointHandler() for name in ITEMS}
  handlers[PROGRESS] = ocp.JsonCheckpointHandler()
  return Manager(directory(workdir), options=options,
                 item_handlers=handlers)


# -- Checksums ----------------------------------------------------------------


def _digests(folder: str, skip: Sequence[str] = ()) -> dict[str, str]:
  """{path relative to `folder`: blake2b digest} of every file in it but
  checksums.json and `skip`."""
  digests = {}
  for relative, path in storage.walk_files(folder):
    if relative == CHECKSUMS or relative in skip:
      continue
    digest = hashlib.blake2b(digest_size=16)
    with path.open('rb') as f:
      while chunk := f.read(1 << 22):
        digest.update(chunk)
    digests[relative] = digest.hexdigest()
  return digests


def record_checksums(folder: str) -> None:
  """Writes `folder`/checksums.json for a checkpoint whose data is complete
  (TensorStore and orbax store no checksum: flipped bytes would restore
  silently)."""
  storage.write_atomically(
      storage.join(folder, CHECKSUMS),
      json.dumps(_digests(folder, skip=_WRITTEN_AFTER_CHECKSUMS), indent=0))


def verify_checksums(folder: str) -> bool:
  """Checks a checkpoint's files against its checksums.json.

  Returns:
    Whether it was verified: False for a checkpoint without checksums.json
    (written by a version that recorded them only after the write, and
    killed before).

  Raises:
    ValueError: naming the files that changed or went missing.
  """
  path = storage.join(folder, CHECKSUMS)
  if not storage.exists(path):
    return False
  try:
    expected = json.loads(storage.read_text(path))
    if not isinstance(expected, dict):
      raise ValueError('not a JSON object')
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError(f'{CHECKSUMS} is damaged ({e})') from e
  found = _digests(folder)
  changed = sorted(name for name, digest in expected.items()
                   if found.get(name) != digest)
  if changed:
    shown = ', '.join(changed[:3]) + (f' and {len(changed) - 3} more'
                                      if len(changed) > 3 else '')
    raise ValueError(f'{len(changed)} of its files changed or went missing '
                     f'since it was written (checksum mismatch: {shown})')
  return True


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
  target = storage.path(workdir) / 'unreadable_checkpoints' / str(step)
  if jax.process_index() == 0:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
      target.rmtree()
    # On cloud storage a rename copies every object; it is rare enough.
    (storage.path(directory(workdir)) / str(step)).rename(target)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'set aside checkpoint {step}')
  return os.fspath(target)


def save(mngr: ocp.CheckpointManager, step: int, params: Any,
         opt_state: Any, progress: dict[str, float] | None = None, *,
         base: dict[str, Any] | None = None) -> None:
  """Starts writing checkpoint `step` (asynchronously); `progress` holds
  the training seconds and units counted up to it. `base`: for low-rank
  adapters saved alone, the checkpoint their base weights are read from,
  {'workdir': ..., 'step': ...} (as peft's adapter_config names its base
  model), or {} for the base of the config's seed."""
  mngr.save(step, args=ocp.args.Composite(
      params=ocp.args.StandardSave(params),
      opt_state=ocp.args.StandardSave(opt_state),
      **{PROGRESS: ocp.args.JsonSave(dict(progress or {}))}),
            custom_metadata=None if base is None else {_BASE: base})


_BASE = 'lora_base'


def adapters_base(mngr: ocp.CheckpointManager, step: int
                  ) -> dict[str, Any] | None:
  """The `base` checkpoint `step` was saved with (None: it holds every
  parameter)."""
  metadata = mngr.metadata(step).custom_metadata or {}
  return metadata.get(_BASE)


def saved_progress(mngr: ocp.CheckpointManager, step: int
                   ) -> dict[str, float] | None:
  """The counts checkpoint `step` holds (None for checkpoints written
  before they were kept there)."""
  if not (mngr.directory / str(step) / PROGRESS).is_dir():
    return None
  return dict(mngr.restore(step, args=ocp.args.Composite(
      **{PROGRESS: ocp.args.JsonRestore()}))[PROGRESS])


class CheckpointsChanged(OSError):
  """Checkpoints went away between being listed and read, again after
  listing them anew: a run trains into the workdir and deletes its older
  checkpoints as it saves new ones (`train.keep_checkpoints`)."""

  def __init__(self, workdir: str, step: int, holder: str = ''):
    run = f' ({holder})' if holder else ''
    super().__init__(
        f'The checkpoints of {workdir} changed while they were read '
        f'(checkpoint {step} was deleted after it was listed, twice): the '
        f'workdir is being trained{run}, and its run deletes older '
        f'checkpoints as it saves new ones. Rerun the command, or wait for '
        f'the run to end.')
    self.workdir, self.step = workdir, step


class _Vanished(Exception):
  """Checkpoint `step` was deleted after it was listed."""

  def __init__(self, step: int):
    super().__init__(f'checkpoint {step} was deleted while it was read')
    self.step = step


def _gone(mngr: ocp.CheckpointManager, step: int, wait: float = 0.0
          ) -> bool:
  """Whether checkpoint `step`'s folder is gone, or goes within `wait`
  seconds (orbax deletes a folder file by file: a read can fail on a
  missing file while the folder is still there)."""
  deadline = time.monotonic() + wait
  while (mngr.directory / str(step)).is_dir():
    if time.monotonic() >= deadline:
      return False
    time.sleep(0.1)
  return True


@contextlib.contextmanager
def _reading(mngr: ocp.CheckpointManager, step: int) -> Iterator[None]:
  """Reads of checkpoint `step`, whose failure once its folder is gone is
  `_Vanished` (a run training into the workdir deleted it), not damage:
  orbax says "Checkpoint at ... not found", TensorStore "NOT_FOUND", the
  OS "No such file"."""
  try:
    yield
  except (IncompatibleCheckpoint, _Vanished):
    raise
  except Exception as e:  # pylint: disable=broad-except
    if _gone(mngr, step, wait=2.0):
      raise _Vanished(step) from e
    raise


def verified(mngr: ocp.CheckpointManager, step: int) -> None:
  """Raises ValueError if checkpoint `step`'s files fail their checksums;
  one without checksums is used, and said to be unverified."""
  with _reading(mngr, step):
    if _gone(mngr, step):
      raise _Vanished(step)
    if verify_checksums(os.fspath(mngr.directory / str(step))):
      return
    if _gone(mngr, step, wait=0.5):  # its checksums.json went with it
      raise _Vanished(step)
  print(f'Checkpoint {step} in {mngr.directory} has no {CHECKSUMS} (an '
        f'older version wrote it and was stopped before recording them): '
        f'using it unverified.', flush=True)


class Unrestorable(ValueError):
  """No checkpoint of a workdir can be read (each was reported)."""


def _unrestorable(folder: Any, steps: Sequence[int]) -> Unrestorable:
  listed = ', '.join(map(str, steps))
  return Unrestorable(
      f'No checkpoint in {folder} can be restored (checkpoint'
      f'{"s" if len(steps) > 1 else ""} {listed}, each reported above). '
      f'Restore them from a copy, or train into a new --workdir.')


def _reason(error: BaseException) -> str:
  """The first line of why a checkpoint cannot be read (orbax and
  TensorStore raise plain Exceptions for damaged files)."""
  return errors.first_line(error)


def restore(mngr: ocp.CheckpointManager, step: int, abstract: dict[str, Any]
           ) -> dict[str, Any]:
  """Restores the items named in `abstract` (name -> tree of
  ShapeDtypeStruct with shardings) onto their shardings."""
  restored = mngr.restore(step, args=ocp.args.Composite(**{
      name: ocp.args.StandardRestore(tree) for name, tree in abstract.items()
  }))
  return {name: restored[name] for name in abstract}


# The vocabulary of a workdir, for the message when it no longer matches the
# checkpoints: (its file, or 'the vocabulary files in FOLDER'; its size).
Vocabulary = tuple[str, int]


def averaged_params(mngr: ocp.CheckpointManager, abstract_params: Any,
                    count: int, vocabulary: Vocabulary | None = None
                    ) -> tuple[Any, Sequence[int]]:
  """Mean of the parameters of the last `count` checkpoints (paper: 5 for
  base, 20 for big models; checkpoints written every 10 minutes there).
  A damaged one is named and left out; the steps averaged are named.

  Returns:
    The averaged parameters and the steps averaged.
  """
  steps = sorted(mngr.all_steps())[-count:]
  if not steps:
    raise FileNotFoundError(f'No checkpoints in {mngr.directory}.')
  total, used = None, []
  for step in steps:
    try:
      with _reading(mngr, step):
        verified(mngr, step)
        _check_readable_shapes(mngr, step, abstract_params, {}, vocabulary)
        params = restore(mngr, step, {'params': abstract_params})['params']
    except (IncompatibleCheckpoint, _Vanished):
      raise
    except Exception as e:  # pylint: disable=broad-except
      print(f'Checkpoint {step} in {mngr.directory} is damaged: '
            f'{_reason(e)}; averaging without it.', flush=True)
      continue
    params = jax.tree.map(lambda a: a.astype(jnp.float32), params)
    total = params if total is None else jax.tree.map(jnp.add, total, params)
    used.append(step)
  if not used:
    raise _unrestorable(mngr.directory, steps[::-1])
  plural = 's' if len(used) > 1 else ''
  asked = f' of the {count} asked for' if len(used) < count else ''
  print(f'Averaged {len(used)} checkpoint{plural} (step{plural} '
        f'{", ".join(map(str, used))}){asked}.', flush=True)
  return jax.tree.map(
      lambda t, a: (t / len(used)).astype(a.dtype), total,
      abstract_params), used


def restore_params(workdir: str, abstract_params: Any, average: int = 1, *,
                   vocabulary: Vocabulary | None = None,
                   step: int | None = None) -> tuple[Any, int]:
  """The latest parameters of a workdir (or the mean of its last `average`
  checkpoints, or those of checkpoint `step`) onto the shardings of
  `abstract_params`, and the step.

  A checkpoint of other parameter shapes is refused before it is read (the
  message names `vocabulary` when that is what no longer matches). One
  deleted after it was listed (a run training into the workdir keeps only
  its latest) makes the checkpoints listed again, once; then
  `CheckpointsChanged`.
  """
  for attempt in range(2):
    mngr = manager(workdir, read_only=True)
    try:
      if mngr.latest_step() is None:
        raise FileNotFoundError(
            f'No checkpoint in {directory(workdir)}; train first: python -m '
            f'transformer.main --workdir={workdir}')
      if average > 1:
        params, steps = averaged_params(mngr, abstract_params, average,
                                        vocabulary)
        return params, steps[-1]
      if step is None:
        chosen = _latest_intact(mngr)
      else:
        chosen = _kept(mngr, step)
        verified(mngr, chosen)
      with _reading(mngr, chosen):
        _check_readable_shapes(mngr, chosen, abstract_params, {}, vocabulary)
        return (restore(mngr, chosen, {'params': abstract_params})['params'],
                chosen)
    except _Vanished as e:
      if attempt:
        raise CheckpointsChanged(workdir, e.step) from None
    finally:
      mngr.close()
  raise AssertionError('unreachable')


def _kept(mngr: ocp.CheckpointManager, step: int) -> int:
  """`step`, if the manager's folder still holds it."""
  steps = sorted(mngr.all_steps())
  if step not in steps:
    raise FileNotFoundError(
        f'Checkpoint {step} is no longer in {mngr.directory} (it holds '
        f'{", ".join(map(str, steps)) or "none"}).')
  return step


def _latest_intact(mngr: ocp.CheckpointManager) -> int:
  """The latest step whose files pass their checksums; damaged newer ones
  are reported (and left in place: reading never moves checkpoints)."""
  steps = sorted(mngr.all_steps(), reverse=True)
  for step in steps:
    try:
      verified(mngr, step)
      return step
    except ValueError as e:
      print(f'Checkpoint {step} in {mngr.directory} is damaged: {e}; '
            f'trying the one before.', flush=True)
  raise _unrestorable(mngr.directory, steps)


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
                 abstract_params: Any, changes: dict[str, tuple[Any, Any]],
                 vocabulary: Vocabulary | None = None) -> None:
  """Refuses a checkpoint whose parameters differ in names or shapes from
  the model of the config, listing the config fields that changed; when
  none of the model's or data's did, naming the `vocabulary` (replaced
  since, or rebuilt) where a differing size is its size."""
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
  changes = {f: c for f, c in changes.items()
             if f.startswith(('model.', 'data.'))}
  if vocabulary is not None and not changes:
    name, size = vocabulary
    trained = sorted({old for param in differing
                      for old, new in zip(saved.get(param, ()),
                                          wanted.get(param, ()))
                      if old != new and new == size})
    if trained:
      raise IncompatibleCheckpoint(
          f'{name} does not match the checkpoints of this workdir: it has '
          f'{size} tokens, checkpoint {step} was trained with a vocabulary '
          f'of {trained[0]} ({shown}{more}); the file was replaced or '
          f'rebuilt since. Restore the vocabulary the checkpoints were '
          f'trained with, or train into a new --workdir.')
  raise incompatible(
      changes, f'checkpoint {step} has parameters of other names or shapes '
      f'({shown}{more})')


def _check_readable_shapes(mngr: ocp.CheckpointManager, step: int,
                           abstract_params: Any,
                           changes: dict[str, tuple[Any, Any]],
                           vocabulary: Vocabulary | None) -> None:
  """`check_shapes` before orbax reads a checkpoint of other shapes (which
  it refuses in a wall of text, its reading threads spilling tracebacks);
  metadata that cannot be read is left to the restore to report."""
  try:
    param_shapes(mngr, step)
  except Exception:  # pylint: disable=broad-except
    if _gone(mngr, step):
      raise _Vanished(step) from None
    return
  check_shapes(mngr, step, abstract_params, changes, vocabulary)


def restore_latest(workdir: str, mngr: ocp.CheckpointManager,
                   abstract: dict[str, Any],
                   changes: dict[str, tuple[Any, Any]],
                   vocabulary: Vocabulary | None = None
                   ) -> tuple[dict[str, Any] | None, int]:
  """The items of the latest checkpoint that restores, with its 'progress'
  (None if it holds none), and its step ((None, 0) when there is none).

  A checkpoint that cannot be read (truncated, missing or changed files) is
  reported and the one before it is tried; once one restores, the
  unreadable newer ones are set aside under workdir/unreadable_checkpoints/
  (so the run can save those steps again). If none restores, nothing is
  moved and `Unrestorable` names them. A checkpoint of another model is
  refused (`check_shapes`; `changes` are the config fields that changed
  since, `vocabulary` the workdir's, for the message).
  """
  failures = []
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      _check_readable_shapes(mngr, step, abstract['params'], changes,
                             vocabulary)
      verified(mngr, step)
      restored = restore(mngr, step, abstract)
      restored[PROGRESS] = saved_progress(mngr, step)
    except IncompatibleCheckpoint:
      raise
    except Exception as e:  # pylint: disable=broad-except
      print(f'Checkpoint {step} cannot be restored: {_reason(e)}',
            flush=True)
      failures.append(step)
      continue
    for failed in failures:
      target = set_aside(workdir, failed)
      print(f'Moved unreadable checkpoint {failed} to {target}; resuming '
            f'from checkpoint {step}.', flush=True)
    if failures:
      mngr.reload()
    return restored, step
  if failures:
    raise _unrestorable(directory(workdir), failures)
  return None, 0


# -- Warm starts --------------------------------------------------------------


def warm_start(params: Any, loaded: Any, *, source: str, step: int,
               quiet: bool = False) -> tuple[Any, list[Any]]:
  """`params` with every array that `loaded` (the parameters of workdir
  `source` at `step`, as the task adapted them) has at the same path and
  shape, e.g. a pretrained encoder under a new head, and the key paths of
  those it left as they were (newly initialised); what was copied is
  printed unless `quiet`."""
  flat_loaded = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
  copied, new, mismatched = [], [], []

  def pick(path, value):
    name = jax.tree_util.keystr(path)
    if path not in flat_loaded:
      new.append(path)
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
  if not quiet:
    print(f'Initialised {len(copied)} parameter arrays from {source} (step '
          f'{step}); newly initialised: '
          f'{list(map(jax.tree_util.keystr, new)) or "none"}; not used: '
          f'{unused or "none"}', flush=True)
  return params, new
