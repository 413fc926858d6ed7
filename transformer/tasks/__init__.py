"""Tasks: what differs between machine translation, language modelling, ...

The trainer sees a task only through the `Task` interface (`tasks/base.py`);
adding a task means adding a module here (with `default_config()`, a
class `TASK` and the kind of examples it reads, `DATA_KIND`, a kind of
`data.sources`) and its name to `TASKS`, never editing the trainer.
"""

from __future__ import annotations

import importlib
from typing import Callable, Iterable

import ml_collections

from transformer import storage
from transformer.data import sources
from transformer.tasks import base
from transformer.tasks.base import Task

TASKS = ('translation', 'language_modeling', 'masked_language_modeling',
         'text_classification', 'image_classification', 'captioning',
         'vision_language', 'visual_question_answering',
         'referring_expressions')


def default_config(task: str) -> ml_collections.ConfigDict:
  """Every setting of a task's experiments, at its default value."""
  return _module(task).default_config()


def build(config: ml_collections.ConfigDict, workdir: str, *,
          batch_divisor: int = 1, shapes_only: bool = False) -> Task:
  """The task named by `config.task`.

  Args:
    config: the experiment config.
    workdir: where the task caches its vocabulary and writes reports.
    batch_divisor: batches must have a multiple of this many rows (the
      number of data-parallel shards).
    shapes_only: model, loss and batch shapes from the config alone, no
      data read and nothing written (`Task`): for `transformer.plan`.
  """
  module = _module(config.task)
  base.check_data(config)
  return module.TASK(config, workdir, batch_divisor=batch_divisor,
                     shapes_only=shapes_only)


def _module(task: str):
  """The module of a task, imported only when that task is used."""
  if task not in TASKS:
    raise ValueError(f'Unknown config.task {task!r}; available: '
                     f'{sorted(TASKS)}.')
  return importlib.import_module(f'transformer.tasks.{task}')


def saved_config(config: ml_collections.ConfigDict
                 ) -> ml_collections.ConfigDict:
  """The config as a workdir's config.json keeps it: config.data without
  the fields only other sources read (`sources.in_use` of the task's
  DATA_KIND), and config.model with only the fields of its model where the
  task's module says which (`saved_config(config)`: translation's
  families). `workdir.load_config` gives the rest back as defaults."""
  if config.get('task') not in TASKS:
    return config
  module = _module(config.task)
  saved = (module.saved_config(config) if hasattr(module, 'saved_config')
           else ml_collections.ConfigDict(config.to_dict()))
  saved.data = sources.in_use(module.DATA_KIND, config.data)
  return saved


def check_data_fields(config: ml_collections.ConfigDict,
                      overrides: Iterable[str]) -> None:
  """Refuses an override (a dotted name, `--config.data.path=...`) of a
  config.data field that only sources other than the chosen one read: it
  would be ignored, and left out of the workdir's config.json. (A model
  field of another family is refused by the family's `model_config`.)"""
  if config.get('task') not in TASKS:
    return
  kind = _module(config.task).DATA_KIND
  kept = sources.in_use(kind, config.data)
  ignored = sorted(name for name in overrides if name.startswith('data.')
                   and name.split('.')[1] not in kept)
  if ignored:
    source = config.data.get('source')
    fields = [name.split('.')[1] for name in ignored]
    raise ValueError(
        f'config.data.source={source!r} does not read '
        f'{", ".join(f"config.{k}" for k in ignored)}: choose a source that '
        f'does (config.data.source: '
        f'{", ".join(sources.sources_reading(kind, fields))}), or drop the '
        f'override.')


def check_init_from(config: ml_collections.ConfigDict) -> None:
  """Refuses a `train.init_from` that is not a workdir this task can start
  from, before anything is built: one that does not exist, a folder no run
  wrote (no config.json), or a run of a task (or model family) the task's
  module does not list in `STARTS_FROM` (default: its own task). The error
  names what the folder is and what would fit."""
  source = config.train.get('init_from')
  if not source or config.get('task') not in TASKS:
    return
  fits = getattr(_module(config.task), 'STARTS_FROM', (config.task,))
  wanted = f'a {" or ".join(fits)} workdir'
  if not storage.exists(source):
    raise FileNotFoundError(
        f'config.train.init_from={source} does not exist: give {wanted} '
        f'(a run trained, or one `transformer.tools.convert` wrote).')
  try:
    task = base.trained_task(source)
  except (OSError, ValueError) as e:
    raise type(e)(f'config.train.init_from={source}: {e} Give {wanted}.'
                  ) from None
  base.check_starts_from(source, task, config.task, fits)
  family = config.model.get('family')
  model = storage.read_record(storage.join(source, 'config.json'),
                              lambda saved: '').get('model')
  trained = model.get('family') if isinstance(model, dict) else None
  if family and trained and family != trained:
    raise ValueError(
        f'config.train.init_from={source} trained a {trained!r} model; '
        f'this config.model.family is {family!r}: set '
        f'--config.model.family={trained} to start from it.')


def restore_config(config: ml_collections.ConfigDict,
                   load_config: Callable[[str], ml_collections.ConfigDict]
                   ) -> None:
  """Brings a config read from a workdir to what that run trained with,
  where its task's module says how (`restore_config(config, load_config)`:
  old workdirs' conventions; `load_config` reads another workdir's)."""
  restore = getattr(_module(config.task), 'restore_config', None)
  if restore:
    restore(config, load_config)


# The vocabulary size the model settings are checked with before the
# vocabulary is built (the model's checks do not depend on it).
_STAND_IN_VOCABULARY = 512


def check_model(config: ml_collections.ConfigDict) -> None:
  """Refuses model settings no model accepts (d_model=-32, a width that
  the heads do not divide, an unknown family), before a vocabulary is
  built or data read: for the tasks whose module builds the model's
  dataclass from the config (`model_config(config, vocab_size)`)."""
  if config.task not in TASKS:
    return  # an unknown task, which `build` names
  model_config = getattr(_module(config.task), 'model_config', None)
  if model_config is not None:
    model_config(config, _STAND_IN_VOCABULARY)
