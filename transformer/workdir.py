"""A workdir: what a run leaves behind, and opening it for inference.

    WORKDIR/
      config.json            the experiment config (save_config, load_config)
      progress.json          step, training seconds and units (`load_progress`)
      run.lock               held by the run training into it (`lock`)
      checkpoints/<step>/    orbax: params and opt_state (`checkpoints`)
      vocab/, dataset.json   the task's own files (vocabulary, class names)
      vocab_built_from.json  the settings vocab/ was built from
      cache/                 the token cache of the training split
      logs/                  training runs' logs
      events.out.tfevents.*  TensorBoard scalars (`metrics.MetricWriter`)
      reports/, plots/       what evaluations write

The workdir's own files are checked against their schema whenever they are
read (`read_checked`: types, ranges, required keys), and a damaged one is
named with its field; an entry of the wrong kind (a folder where run.lock
goes, a file where cache/ goes) is refused before a run writes anything
(`check_layout`). `restore(workdir)` gives a trained workdir's task,
parameters and step, with no optimizer or train step built: the one way
commands, fine-tuning and tests open a workdir. A workdir may be a local
folder or a URL (`gs://bucket/path`): every file goes through `storage`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import functools
import json
import math
import os
import re
import socket
from typing import Any, Callable, Iterator, Sequence

import jax
import ml_collections

from transformer import checkpoints
from transformer import errors
from transformer import sharding
from transformer import storage
from transformer import tasks
from transformer.attention import lora
from transformer.tasks import base
from transformer.tasks import vocabularies

CONFIG_FILE = 'config.json'
PROGRESS_FILE = 'progress.json'
LOCK_FILE = 'run.lock'
# Settings whose change makes old checkpoints mean something else even when
# every parameter keeps its shape: the task and the token ids.
REFUSED_CHANGES = ('task', 'data.tokenizer', 'data.tokenizer_model_type',
                   'data.vocab_size')


# The workdir's entries of a fixed kind: (a folder?, what it is, the fix).
LAYOUT = {
    CONFIG_FILE: (False, 'the config file of the run',
                  'move it away (each run writes its own)'),
    PROGRESS_FILE: (False, 'the progress file',
                    'remove it (the checkpoints hold the counts)'),
    LOCK_FILE: (False, 'the lock file (it names the run training here)',
                'remove it (each run writes its own)'),
    vocabularies.RECORD: (False, 'the file of what vocab/ was built from',
                          'move it away'),
    'checkpoints': (True, 'the checkpoints folder', 'move it away'),
    'vocab': (True, 'the vocabulary folder', 'move it away'),
    'cache': (True, 'the token cache folder',
              'remove it (the cache is rebuilt from the data)'),
    'logs': (True, 'the log folder', 'move it away'),
}


def check_layout(workdir: str) -> None:
  """Refuses, before a run writes anything, an empty workdir path (the
  current directory) and an entry of the wrong kind (`LAYOUT`: a folder
  where run.lock goes, a file where cache/ goes), naming it, what it
  should be and the fix, where the OS would say "Is a directory" or "File
  exists" in the middle of the run."""
  if not str(workdir).strip():
    raise ValueError('The workdir is empty: give the folder the run writes '
                     'into (an empty path would be the current directory).')
  for name, (folder, what, fix) in LAYOUT.items():
    path = storage.path(storage.join(workdir, name))
    if not path.exists() or path.is_dir() == folder:
      continue
    raise (NotADirectoryError if folder else IsADirectoryError)(
        f'{path} is a {"file" if folder else "folder"}, not {what}: {fix}, '
        f'then rerun.')


def check_writable(workdir: str) -> None:
  """Refuses, before anything is built, a workdir this process cannot
  write (permissions, read-only or full filesystem)."""
  check_layout(workdir)
  probe = storage.join(workdir, f'.write_test_{jax.process_index()}')
  try:
    storage.makedirs(workdir)
    storage.write_atomically(probe, 'ok')
    storage.path(probe).unlink()
  except OSError as e:
    raise OSError(f'Cannot write to the workdir {workdir}: '
                  f'{e.strerror or e}. Fix its permissions or free space, '
                  f'or choose another --workdir.') from e


class WorkdirBusy(OSError):
  """Another training run holds the workdir."""


@contextlib.contextmanager
def lock(workdir: str) -> Iterator[None]:
  """Holds the workdir for one training run: an advisory lock on
  WORKDIR/run.lock, which names its holder (host, pid, start), kept for the
  run's life (process 0 holds it for a multi-host run). A second run is
  refused naming the holder; the lock of a process that died (the system
  releases it) is taken over, with a message. Read-only commands
  (translate, generate, predict) do not lock."""
  if jax.process_index() != 0:
    yield
    return
  if storage.is_remote(workdir):
    with _remote_lock(workdir):
      yield
    return
  path = storage.join(workdir, LOCK_FILE)
  handle, previous, damaged = _take_lock(workdir, path)
  try:
    if damaged:
      print(f'{damaged}; no run holds it, so this run takes it over.',
            flush=True)
    elif previous:
      print(f'Taking over {path} from a run that ended without releasing it '
            f'({previous}).', flush=True)
    handle.truncate(0)
    handle.write(_holder().encode('utf-8'))
    handle.flush()
    yield
  finally:
    # However the run ended, the file goes while still locked, so a
    # finished workdir keeps no lock file (a killed run's stays, naming
    # it, for the next run to take over).
    with contextlib.suppress(FileNotFoundError):
      os.unlink(path)
    handle.close()  # which releases the lock


def _take_lock(workdir: str, path: str):
  """(the open, locked run.lock, its previous holder, its damage). A file
  unlinked by a run that ended between our open and our lock is not the
  lock any more: opened again."""
  while True:
    # Appending: opening never empties the record of a holder still running.
    handle = open(path, 'a+b')  # pylint: disable=consider-using-with
    try:
      handle.seek(0)
      previous, damaged = _lock_record(path, handle.read())
      try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError as e:
        holder = previous or damaged or 'holder unknown'
        raise WorkdirBusy(
            f'{workdir} is in use by another training run ({holder}): wait '
            f'for it to end or stop it, or train into another --workdir.'
        ) from e
      if _same_file(handle, path):
        return handle, previous, damaged
    except BaseException:
      handle.close()
      raise
    handle.close()


def _same_file(handle, path: str) -> bool:
  try:
    return os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
  except FileNotFoundError:
    return False


def _lock_record(path: str, raw: bytes) -> tuple[str, str]:
  """(the holder record of run.lock, '' when released; the damage, '' when
  there is none)."""
  try:
    return read_checked(path, raw), ''
  except DamagedFile as e:
    return '', str(e)


def _holder() -> str:
  return (f'host {socket.gethostname()}, pid {os.getpid()}, since '
          f'{datetime.datetime.now().isoformat(timespec="seconds")}')


@contextlib.contextmanager
def _remote_lock(workdir: str) -> Iterator[None]:
  """run.lock on cloud storage, which has no file locks: the file names
  its holder while the run lasts and is deleted when it ends. A record
  left by a process of this host that is gone is taken over; one of
  another host is refused, naming it and the file to delete if that run
  is gone (a preempted VM's run, say)."""
  path = storage.path(storage.join(workdir, LOCK_FILE))
  if path.exists():
    previous, damaged = _lock_record(os.fspath(path), path.read_bytes())
    match = re.fullmatch(_LOCK_RECORD, previous)
    if not (match and match.group(1) == socket.gethostname()
            and not _alive(int(match.group(2)))):
      raise WorkdirBusy(
          f'{workdir} is in use by another training run ('
          f'{previous or damaged or "holder unknown"}): wait for it to end '
          f'or stop it, or train into another --workdir. If that run is '
          f'gone, delete {path}.')
    print(f'Taking over {path} from a run that ended without releasing it '
          f'({previous}).', flush=True)
  storage.write_atomically(os.fspath(path), _holder())
  try:
    yield
  finally:
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass  # alive, another user's
  return True


# -- config.json --------------------------------------------------------------


def save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """config.json: every field that applies to the run's model
  (`tasks.saved_config`); `load_config` restores the rest as defaults."""
  if jax.process_index() == 0:
    storage.write_atomically(
        storage.join(workdir, CONFIG_FILE),
        tasks.saved_config(config).to_json_best_effort(indent=2))


def _saved(workdir: str) -> dict[str, Any]:
  path = storage.join(workdir, CONFIG_FILE)
  if not storage.exists(path):
    raise FileNotFoundError(
        f'{path} not found: {workdir} is not a training workdir. Train into '
        f'it first: python -m transformer.main --workdir={workdir}')
  try:
    return read_checked(path)
  except DamagedFile as e:
    raise DamagedFile(f'{e}. Correct it, restore it from a copy, or train '
                      f'into a new --workdir.') from e


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a workdir was trained with. Settings added to the task
  since then take their default values (`tools.cli.workdir_config` also
  refuses a workdir of another task, naming the command that reads it)."""
  saved = _saved(workdir)
  config = tasks.default_config(saved['task'])
  config.update(saved)
  tasks.restore_config(config, load_config)
  return config


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
  if not storage.exists(storage.join(workdir, CONFIG_FILE)):
    return {}
  raw = _saved(workdir)
  # Both as config.json keeps them now: the fields another source or model
  # family would read are in neither (a config.json written before kept
  # them all).
  saved = _flat(raw)
  if raw['task'] in tasks.TASKS:
    whole = tasks.default_config(raw['task'])
    whole.update(raw)
    kept = _flat(json.loads(tasks.saved_config(whole).to_json_best_effort()))
    dropped = set(_flat(whole.to_dict())) - set(kept)
    saved = {field: value for field, value in saved.items()
             if field not in dropped}
  now = _flat(json.loads(tasks.saved_config(config).to_json_best_effort()))
  return {field: (saved.get(field), now.get(field))
          for field in sorted(set(saved) | set(now))
          if saved.get(field) != now.get(field)}


# How to train on from a workdir of each task with a config of another.
_TRAIN_ON = {'language_modeling': (
    'To train this language model on your own text: '
    '--config=experiments/lm_finetune.py:init_from={workdir},path=TEXT '
    '(--workdir={workdir} trains on in it).')}


def check_same_task(workdir: str, config: ml_collections.ConfigDict) -> None:
  """Refuses a config of another task than the checkpoints of `workdir`,
  before that task is built (it would read or build a vocabulary no
  checkpoint here was trained with), naming how to train on."""
  if not checkpoints.exist(workdir) or not storage.exists(
      storage.join(workdir, CONFIG_FILE)):
    return
  saved = _saved(workdir).get('task')
  if saved != config.task:
    error = checkpoints.incompatible({'task': (saved, config.task)},
                                     'the task changed')
    hint = _TRAIN_ON.get(saved, '').format(workdir=workdir)
    raise type(error)(f'{error} {hint}'.strip())


def check_config_change(changes: dict[str, tuple[Any, Any]]) -> None:
  """Refuses changes no checkpoint survives; reports the others, which the
  resumed run applies (learning rate, steps, evaluation, mesh, ...)."""
  refused = {f: c for f, c in changes.items() if f in REFUSED_CHANGES}
  if refused:
    raise checkpoints.incompatible(
        refused, 'the task or the vocabulary changed')
  if changes:
    print('Resuming with config changes: ' + '; '.join(
        f'{field} {old!r} -> {new!r}'
        for field, (old, new) in changes.items()), flush=True)


# -- progress.json ------------------------------------------------------------


def load_progress(workdir: str) -> dict[str, float]:
  """What a training run recorded: 'step', 'train_seconds' and the count of
  its units (e.g. 'tokens'); empty before its first checkpoint. A damaged
  file only loses those counts (the checkpoints hold the run): it is
  reported and read as empty."""
  path = storage.join(workdir, PROGRESS_FILE)
  if not storage.exists(path):
    return {}
  try:
    return read_checked(path)
  except DamagedFile as e:
    print(f'{e}; training time and token counts start again from here, the '
          f'checkpoints are unaffected.', flush=True)
    return {}


def save_progress(workdir: str, progress: dict[str, float]) -> None:
  if jax.process_index() == 0:
    storage.write_atomically(storage.join(workdir, PROGRESS_FILE),
                           json.dumps(progress))


# -- The workdir's own files: one schema check each ----------------------------


# A workdir file that does not fit its schema (`read_checked`).
DamagedFile = storage.DamagedFile


_LOCK_RECORD = r'host (\S+), pid (\d+), since .*'


def _lock_problem(record: str) -> str:
  if record and not re.fullmatch(_LOCK_RECORD, record):
    return (f'{record[:60]!r} is not a holder record ("host H, pid N, since '
            f'TIME")')
  return ''


def _progress_problem(progress: Any) -> str:
  """progress.json: {"step": int >= 0, unit: number >= 0, ...}."""
  if not isinstance(progress, dict):
    return f'not a JSON object but {type(progress).__name__}'
  if 'step' not in progress:
    return 'no "step"'
  for key, value in progress.items():
    if key == 'step':
      if not (_is_int(value) and value >= 0):
        return f'"step" is {storage.shown(value)}, not a whole number >= 0'
    elif not (_is_number(value) and math.isfinite(value) and value >= 0):
      return f'"{key}" is {storage.shown(value)}, not a finite number >= 0'
  return ''


# Sections every config.json has: without one, the task's defaults would
# silently stand for the model, data and training the checkpoints had.
REQUIRED_SECTIONS = ('model', 'data', 'train', 'optimizer')


def _config_problem(saved: Any) -> str:
  """config.json: an object naming its task, with the sections
  `REQUIRED_SECTIONS`, whose sections and values have the types of that
  task's default config (fields it no longer has are ignored; fields added
  since take their defaults) and values in their ranges (those the run
  checks before training)."""
  if not isinstance(saved, dict) or not isinstance(saved.get('task'), str):
    return 'not an experiment config (no "task")'
  if saved['task'] not in tasks.TASKS:
    return (f'"task" is {storage.shown(saved["task"])}, not one of '
            f'{", ".join(tasks.TASKS)}')
  missing = [name for name in REQUIRED_SECTIONS if name not in saved]
  if missing:
    return (f'no "{missing[0]}" section: the task\'s default {missing[0]} '
            f'settings would stand in for those the run had')
  schema = tasks.default_config(saved['task'])
  return (_fields_problem(saved, schema, '') or
          _values_problem(saved, schema))


def _values_problem(saved: dict[str, Any],
                    schema: ml_collections.ConfigDict) -> str:
  """A value out of its range (d_model=-32, a beam size of 0), as the
  task's checks before training name it."""
  config = schema.copy_and_resolve_references()
  try:
    config.update(saved)
    base.check_data(config)
    tasks.check_model(config)
  except (ValueError, TypeError, KeyError) as e:
    return str(e).strip("'").rstrip('.')
  return ''


def _fields_problem(saved: dict[str, Any], schema: ml_collections.ConfigDict,
                    prefix: str) -> str:
  for key, value in saved.items():
    field = f'{prefix}{key}'
    if key not in schema or key == 'task':
      continue
    if isinstance(schema[key], ml_collections.ConfigDict):
      if not isinstance(value, dict):
        return f'"{field}" is {storage.shown(value)}, not a section (a JSON object)'
      problem = _fields_problem(value, schema[key], f'{field}.')
      if problem:
        return problem
      continue
    if value is None and schema[key] is None:
      continue  # a placeholder: the named size's value
    kind = schema.get_type(key)
    try:
      # ml_collections takes true for a number, and null for anything.
      if value is None or (isinstance(value, bool) and kind in (int, float)):
        raise TypeError
      ml_collections.FieldReference(schema[key], field_type=kind).set(value)
    except TypeError:
      return (f'"{field}" is {storage.shown(value)}, not '
              f'{_TYPE_WORDS.get(kind, f"a {kind.__name__}")}')
  return ''


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


# A config field's type in words; ml_collections checks the value.
_TYPE_WORDS = {bool: 'true or false', int: 'a whole number',
               float: 'a number', str: 'a string', tuple: 'a list',
               list: 'a list'}

# Each file: (whether it is JSON, its schema check: the problem, or '').
SCHEMAS: dict[str, tuple[bool, Callable[[Any], str]]] = {
    CONFIG_FILE: (True, _config_problem),
    PROGRESS_FILE: (True, _progress_problem),
    LOCK_FILE: (False, _lock_problem),
    vocabularies.RECORD: (True, vocabularies.record_problem),
}


def read_checked(path: str, raw: bytes | None = None) -> Any:
  """The content of a workdir file (`SCHEMAS`: its JSON value, or its text
  stripped), read from `path` unless `raw` is given.

  Raises:
    DamagedFile: '{path} is damaged: <the problem, naming the field>'.
  """
  is_json, problem_of = SCHEMAS[os.path.basename(path)]
  return storage.read_record(path, problem_of, is_json=is_json, raw=raw)


# -- Inference ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Restored:
  """A trained workdir ready for inference: run the task's methods on
  `params` inside `with restored.active():` (mesh and axis rules)."""
  config: ml_collections.ConfigDict
  task: tasks.Task
  params: Any
  step: int
  mesh: jax.sharding.Mesh
  rules: tuple[tuple[str, Any], ...]
  workdir: str = ''

  @contextlib.contextmanager
  def active(self) -> Iterator[None]:
    with sharding.active(self.mesh, self.rules):
      yield


def restore(workdir: str, *, average: int = 1,
            devices: Sequence[jax.Device] | None = None,
            step: int | None = None) -> Restored:
  """The task, latest parameters (or the mean of the last `average`
  checkpoints, or those of checkpoint `step`) and step of a trained
  workdir, sharded over `devices` (default all) as its config says.

  A run of low-rank adapters (`model.lora_rank`) saved them alone: they
  are read onto their base weights and folded into the kernels
  (`lora.merged`), so the task restored is its base model's, as fast."""
  config = load_config(workdir)
  mesh = sharding.make_mesh(config.mesh.to_dict(), devices)
  rules = sharding.rules_from_config(config.axis_rules)
  task = tasks.build(config, workdir,
                     batch_divisor=sharding.batch_divisor(mesh))
  with sharding.active(mesh, rules):
    initialise, abstract = sharding.sharded_init(
        task.init, jax.random.key(config.seed), mesh, rules)
  adapted = adapters_of(task) is not None
  if adapted and average > 1:
    raise ValueError(
        f'{workdir} trained low-rank adapters: averaging their A and B '
        f'apart does not average the updates they make. Restore one '
        f'checkpoint (average=1).')
  # Checkpoints of adapters alone name their base; others hold every
  # weight (a LoRA run without init_from, or one from before).
  base = _saved_base(workdir) if adapted else None
  try:
    params, step = checkpoints.restore_params(
        workdir, abstract if base is None else lora.adapters(abstract),
        average, vocabulary=vocabulary(workdir, task), step=step)
  except checkpoints.CheckpointsChanged as e:  # naming the run, if any
    raise checkpoints.CheckpointsChanged(
        workdir, e.step, _lock_record(*_lock_bytes(workdir))[0]) from None
  restored = Restored(config, task, params, step, mesh, rules, workdir)
  if base is not None:
    with sharding.active(mesh, rules):
      restored = dataclasses.replace(restored, params=lora.with_adapters(
          adapters_base(task, initialise, base), params))
  return _merged(restored) if adapted else restored


def adapters_of(task: tasks.Task) -> lora.Lora | None:
  """The low-rank adapters a task's model has (None: every weight trains;
  models without the lora_* fields never have them)."""
  return getattr(getattr(task, 'model_config', None), 'lora', None)


def _saved_base(workdir: str) -> dict[str, Any] | None:
  """The base checkpoint the adapters of a workdir's latest checkpoint
  were trained on (None: its checkpoints hold every weight)."""
  mngr = checkpoints.manager(workdir, read_only=True)
  try:
    step = mngr.latest_step()
    return None if step is None else checkpoints.adapters_base(mngr, step)
  finally:
    mngr.close()


def adapters_base(task: tasks.Task, initialise: Callable[[], Any],
                  record: dict[str, Any]) -> Any:
  """The parameters low-rank adapters train on: the config's seed's draw
  with every weight of `record`'s checkpoint ({'workdir', 'step'}: the
  one of `train.init_from` they started from) copied in."""
  where = f'checkpoint {record["step"]} of {record["workdir"]}'
  try:
    source = restore(record['workdir'], step=record['step'])
  except FileNotFoundError as e:
    raise FileNotFoundError(
        f'The base weights of these adapters, {where}, cannot be read '
        f'({errors.first_line(e)}): put that workdir and its checkpoint '
        f'{record["step"]} back (a run that trains on deletes its old '
        f'checkpoints), or retrain the adapters.') from None
  except checkpoints.IncompatibleCheckpoint as e:
    raise checkpoints.IncompatibleCheckpoint(
        f'The base of these adapters, {where}, no longer fits them '
        f'({errors.first_line(e)}): retrain the adapters.') from None
  params, fresh = warm_started(task, initialise(), source, quiet=True)
  del fresh  # the adapters, which the checkpoint holds
  return params


def warm_started(task: tasks.Task, params: Any, source: Restored, *,
                 quiet: bool = False) -> tuple[Any, list[Any]]:
  """`params` with every array of `source` (a restored workdir) of the
  same path and shape, after `task` adapted them
  (`Task.adapt_pretrained`): what `train.init_from` starts from; and the
  key paths of the arrays it left newly initialised."""
  loaded = task.adapt_pretrained(source.params, params, source.task)
  return checkpoints.warm_start(params, loaded,
                                source=source.workdir, step=source.step,
                                quiet=quiet)


def _merged(restored: Restored) -> Restored:
  """A LoRA run restored as its base model with the adapters folded in."""
  config = ml_collections.ConfigDict(restored.config.to_dict())
  config.model.lora_rank = 0
  task = tasks.build(config, restored.workdir,
                     batch_divisor=sharding.batch_divisor(restored.mesh))
  with restored.active():
    params = jax.jit(functools.partial(
        lora.merged, lora=adapters_of(restored.task)))(restored.params)
  return dataclasses.replace(restored, config=config, task=task,
                             params=params)


def vocabulary(workdir: str, task: tasks.Task
               ) -> checkpoints.Vocabulary | None:
  """The workdir's vocabulary and its size, for a message when it does not
  match the checkpoints (None for a task without one)."""
  tokenizer = getattr(task, 'tokenizer', None)
  if tokenizer is None:
    return None
  return vocabularies.describe(workdir), tokenizer.vocab_size


def _lock_bytes(workdir: str) -> tuple[str, bytes]:
  path = storage.join(workdir, LOCK_FILE)
  try:
    return path, storage.path(path).read_bytes()
  except OSError:
    return path, b''
