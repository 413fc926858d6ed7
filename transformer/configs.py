"""Experiment configs: the trainer's defaults, experiment files, overrides,
and the model section of a task's config derived from its model dataclass.

Tasks build their `default_config()` on `default_config()` here; experiment
files (`experiments/*.py`, `get_config(arg)`) change what they need;
`load_experiment('file.py:arg')` loads one as `--config=file.py:arg` does;
`override` applies `a.b=value` assignments as `--config.a.b=value` flags do.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import os
import shlex
import types
import typing
from typing import Any, Mapping, Sequence

import ml_collections
from ml_collections import config_dict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The experiment files, inside the package (installed with it).
EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'experiments')


def default_config() -> ml_collections.ConfigDict:
  """The trainer's settings; tasks add theirs (e.g. `data`, `model`)."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.task = ''
  config.train = ml_collections.ConfigDict(dict(
      num_steps=100_000, log_every=100, eval_every=5_000,
      checkpoint_every=1_000, keep_checkpoints=20, label_smoothing=0.1,
      init_from='',  # a workdir whose parameters start a new run
      # Evaluate before the first step too (a new run's; a fine-tuning's
      # starting point), as eval at step 0.
      eval_at_start=False,
      # Gradient accumulation: each step's batch is split into this many
      # micro-batches whose gradients are summed before one update (the
      # same update as the whole batch, in less activation memory).
      microbatches=1,
      # A step with a non-finite loss, gradient or update is never applied;
      # then 'stop' ends the run with a report, 'skip' goes on (and stops
      # after max_consecutive_skips such steps in a row). See faults.py.
      nonfinite='stop', max_consecutive_skips=10))
  # Vaswani et al. 5.3: Adam(0.9, 0.98, 1e-9), D^-0.5 * rsqrt schedule.
  config.optimizer = ml_collections.ConfigDict(dict(
      name='adam',  # or 'sgd': SGD with momentum b1 (ViT fine-tuning)
      schedule='rsqrt', learning_rate=512**-0.5, warmup_steps=4_000, b1=0.9,
      b2=0.98, eps=1e-9, grad_clip_norm=0.0, weight_decay=0.0,
      # Parameters whose path matches one of these regular expressions are
      # never decayed (e.g. a ViT's class token and position embeddings).
      weight_decay_skip=(),
      end_learning_rate_ratio=0.1,  # end of the cosine schedule
      # Adam's first moment in this dtype ('bfloat16' halves its memory;
      # the second moment stays float32, as in optax and big_vision).
      mu_dtype='float32'))
  config.eval = ml_collections.ConfigDict(dict(average_checkpoints=1))
  # -1: all remaining devices. Pure data parallelism by default; fsdp > 1
  # shards parameters and optimizer state, tensor > 1 splits heads and mlp.
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  # Logical axis -> mesh axes, applied in order; a mesh axis is used once per
  # array, so activations [batch, length, embed] give fsdp to 'batch' and
  # keep 'embed' whole, while parameters shard 'embed' over fsdp (FSDP).
  # Axes of size 1 shard nothing: the same rules serve every mesh.
  config.axis_rules = [('batch', ('data', 'fsdp')), ('length', None),
                       ('embed', 'fsdp'), ('mlp', 'tensor'),
                       ('heads', 'tensor'), ('kv', None), ('vocab', 'tensor'),
                       ('layers', None)]
  return config


# -- Experiment files ---------------------------------------------------------


def experiment_names() -> list[str]:
  """The experiments' names ('mt_offline', ...; the paper tables' are
  'paper/NAME')."""
  names = []
  for folder in ('', 'paper'):
    names += sorted(os.path.join(folder, name[:-3]) for name in os.listdir(
        os.path.join(EXPERIMENTS, folder))
                    if name.endswith('.py') and name != '__init__.py')
  return names


def experiment_file(spec: str) -> str:
  """'FILE.py[:arg]' or 'NAME[:arg]' as the experiment file's path with the
  same argument: a file relative to the working directory; else an
  experiment's name ('mt_offline', 'paper/vaswani2017_table3') or its path
  in a checkout ('experiments/mt_offline.py'), found inside the package
  from any directory. Unchanged where none exists (callers refuse it)."""
  path, colon, arg = spec.partition(':')
  if os.path.exists(path):
    return spec
  inside = path.removeprefix('experiments/')
  for candidate in (os.path.join(EXPERIMENTS, inside),
                    os.path.join(EXPERIMENTS, inside + '.py')):
    if inside and os.path.isfile(candidate):
      return candidate + colon + arg
  return spec


def load_experiment(spec: str) -> ml_collections.ConfigDict:
  """`get_config(arg)` of 'file.py[:arg]' or 'NAME[:arg]', as `--config`
  gives it (`experiment_file`)."""
  path, _, arg = experiment_file(spec).partition(':')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'No experiment file or name {path}; the experiments are '
        f'{", ".join(experiment_names())} (or a file of your own).')
  module_spec = importlib.util.spec_from_file_location(
      f'experiment_{os.path.splitext(os.path.basename(path))[0]}', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


# Experiment arguments that name a workdir: one given empty ('init_from=')
# or without a value would be read as the path '' or 'true'.
WORKDIR_ARGS = ('init_from',)


def parse_args(arg: str, *, name: str, known: Sequence[str],
               required: Sequence[str] = ()) -> dict[str, str]:
  """An experiment's argument string: 'path=DIR,src=de,runlocal' ->
  {'path': 'DIR', 'src': 'de', 'runlocal': 'true'}.

  Args:
    arg: the text after ':' in --config.
    name: the experiment file, for messages.
    known: every accepted key (a misspelt key must not be ignored).
    required: keys that must be given.
  """
  items = [item for item in arg.split(',') if item]
  args = dict((item.split('=', 1) + ['true'])[:2] for item in items)
  unknown = sorted(set(args) - set(known))
  if unknown:
    raise ValueError(f'{name}: unknown arguments {unknown}; known: '
                     f'{", ".join(known)}.{_comma_hint(arg, known)}')
  for key in WORKDIR_ARGS:
    if key in items or args.get(key) == '':
      raise ValueError(
          f'{name}: {key} is empty; give the workdir whose parameters start '
          f'this run, as {key}=WORKDIR.')
  missing = [key for key in required if key not in args]
  if missing:
    raise ValueError(f'{name} needs {", ".join(missing)}, e.g. '
                     f'--config={name}:' + ','.join(f'{k}=...'
                                                    for k in required))
  return args


# The config fields the experiments' common arguments set.
_ARGUMENT_FIELDS = {'path': 'data.path', 'data_dir': 'data.tfds_data_dir'}


def _comma_hint(arg: str, known: Sequence[str]) -> str:
  """Where an unknown argument follows a known one's value, that value
  probably held a comma (a folder 'dir,with=comma'), which the argument
  string cannot carry: how to give it instead."""
  items = [item for item in arg.split(',') if item]
  keys = [item.partition('=')[0] for item in items]
  for i in range(1, len(items)):
    key, _, value = items[i - 1].partition('=')
    if keys[i] in known or key not in known or not value:
      continue
    end = next((j for j in range(i, len(items)) if keys[j] in known),
               len(items))
    whole = ','.join([value, *items[i:end]])
    field = _ARGUMENT_FIELDS.get(key)
    flag = (f'--config.{field}={shlex.quote(whole)}' if field else
            f'--config.FIELD={shlex.quote(whole)}, FIELD the config field '
            f'{key}= sets (the experiment\'s docstring says which)')
    return (f' A comma separates the arguments, so {key}={whole} was cut '
            f'at its comma. Give that value as a flag, which takes any '
            f'text: {flag}; where the experiment requires {key}=, give it '
            f'any value without a comma.')
  return ''


# -- Overrides ----------------------------------------------------------------


class UnknownField(ValueError):
  """An override names a field the config does not have."""


def parse_assignments(text: str) -> dict[str, Any]:
  """'a.b=1,c=x' -> {'a.b': 1, 'c': 'x'}: values as python literals, else
  strings, as --config.a.b=value flags read them."""
  assignments = {}
  for item in filter(None, text.split(',')):
    if '=' not in item:
      raise ValueError(f'{item!r} in {text!r} is not field=value.')
    field, value = item.split('=', 1)
    try:
      assignments[field.strip()] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      assignments[field.strip()] = value  # a plain string
  return assignments


def override(config: ml_collections.ConfigDict,
             overrides: str | Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A copy of `config` with the overrides set: {'a.b': value} or the text
  'a.b=value,c=value' (see `parse_assignments`). A field the config lacks
  raises `UnknownField`, never silently added or ignored."""
  if isinstance(overrides, str):
    overrides = parse_assignments(overrides)
  config = config.copy_and_resolve_references()
  for field, value in overrides.items():
    *parents, name = field.split('.')
    node = config
    for parent in parents:
      node = node[parent] if isinstance(node, ml_collections.ConfigDict) \
          and parent in node else None
      if node is None:
        break
    if not isinstance(node, ml_collections.ConfigDict) or name not in node:
      raise UnknownField(f'config has no field {field}')
    node[name] = value
  return config


# -- The model section --------------------------------------------------------

# Command-line values are parsed by the type of their placeholder.
_SIMPLE_TYPES = (bool, int, float, str)
# Modes, not hyperparameters: set by the code that builds the model.
_MODES = frozenset({'decode'})


@functools.cache
def model_fields(model_class: type, exclude: frozenset[str] = frozenset()
                 ) -> dict[str, type]:
  """{field: type} of a model dataclass's hyperparameters that a config may
  set: those of type bool, int, float or str (or None-able), but not
  `exclude` (what the task sets from its data, e.g. vocab_size) or the
  decode mode."""
  hints = typing.get_type_hints(model_class)
  fields = {}
  for field in dataclasses.fields(model_class):
    kind = hints[field.name]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is \
        typing.Union:
      kind = next((k for k in typing.get_args(kind) if k is not type(None)),
                  None)
    if kind in _SIMPLE_TYPES and field.name not in exclude | _MODES:
      fields[field.name] = kind
  return fields


def model_section(*model_classes: type, exclude: Sequence[str] = (),
                  **values: Any) -> ml_collections.ConfigDict:
  """A task's `config.model`: `values` (e.g. size, dtype) and a placeholder
  (None: the named size's value) for every field of the model dataclasses;
  placeholders keep their type, so `--config.model.num_heads=4` parses."""
  section = ml_collections.ConfigDict(values)
  for model_class in model_classes:
    for field, kind in model_fields(model_class, frozenset(exclude)).items():
      if field not in section:
        section[field] = config_dict.placeholder(kind)
  return section


def section_in_use(section: ml_collections.ConfigDict, model_class: type,
                   exclude: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """`section` without the placeholders (None) of fields `model_class`
  does not have: a task whose section serves several model families
  (translation's) writes only the chosen family's fields."""
  applies = model_fields(model_class, frozenset(exclude))
  kept = {key: value for key, value in section.items()
          if value is not None or key in applies}
  return ml_collections.ConfigDict(kept)


def model_overrides(section: ml_collections.ConfigDict, model_class: type,
                    exclude: Sequence[str] = ()) -> dict[str, Any]:
  """The fields of `model_class` that `section` (a config's model section)
  sets, i.e. those not left at None."""
  return {field: section[field] for field in
          model_fields(model_class, frozenset(exclude))
          if section.get(field) is not None}


def model_values(model_config: Any, section: ml_collections.ConfigDict
                 ) -> dict[str, Any]:
  """Every field of a model dataclass instance that `section` has, for
  writing a complete model section (e.g. of a converted checkpoint)."""
  return {field: getattr(model_config, field)
          for field in model_fields(type(model_config)) if field in section}
