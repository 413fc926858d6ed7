"""Published tables as specifications: rows of config overrides on a base
experiment, with the values the paper reports.

A table specification is a python file (see `experiments/paper/`) that
defines:

  TITLE    the table, e.g. 'Vaswani et al. 2017, Table 3 (...)'.
  SCALES   {name: Scale}: the base experiment of each scale ('paper', the
           published setting; 'reduced', one that trains on one machine).
  ROWS     (Row, ...): each row's overrides at each scale and the paper's
           values.
  COLUMNS  (Column, ...): what the table shows.
  NOTES    text printed under the table (assumptions, caveats).
  AVERAGE  optional: column keys whose values (ours and the paper's, over
           every row) are averaged into a last row, as a benchmark score
           (GLUE's) is.

Rows of translation experiments (Vaswani et al.) and of sentence
classification (GLUE) are understood: their model, parameter count and
settings come from the task the row's config names.

`reproduce.rows` (the command `python -m transformer.tools.reproduce`)
runs, prints or collects the rows of a spec.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any

import ml_collections

from transformer import configs
from transformer.data import glue
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.tasks import text_classification
from transformer.tasks import translation


@dataclasses.dataclass(frozen=True)
class Scale:
  """A base experiment (`file.py[:arg]`, as --config takes it) and the
  overrides every row gets at this scale; `about` says what the scale is,
  for the table's header; `seeds`: runs per row (seeds config.seed,
  config.seed + 1, ...), whose mean and spread the table gives."""
  config: str
  about: str
  overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
  seeds: int = 1


@dataclasses.dataclass(frozen=True)
class Row:
  """One row: `name` names its workdir and is what --rows selects (with
  `group`); `changes` maps a scale to the row's overrides ({'model.num_heads':
  1}), a scale missing from it has no equivalent of the row; `configs` may
  give a row its own base experiment at a scale; `paper` maps column keys to
  the published values."""
  name: str
  group: str
  label: str
  changes: dict[str, dict[str, Any]]
  paper: dict[str, Any] = dataclasses.field(default_factory=dict)
  configs: dict[str, str] = dataclasses.field(default_factory=dict)
  # The scalar a 'row_metric' column shows (e.g. 'eval/matthews' for CoLA).
  metric: str = ''


@dataclasses.dataclass(frozen=True)
class Column:
  """`source`: 'setting:NAME' (a hyperparameter of the row, see
  `settings`), 'metric:TAG' (a final evaluation scalar of the run, e.g.
  'metric:eval/bleu'), 'row_metric' (the scalar `Row.metric` names),
  'params' (millions, from the config) or 'hours' (training time). `paper`:
  also show the paper's value beside ours."""
  key: str
  title: str
  source: str
  digits: int = 2
  paper: bool = False
  scale: float = 1.0  # ours times this (e.g. 100: fractions as percent)


def load_spec(path: str):
  """The table specification module at `path`, checked."""
  if not os.path.exists(path):
    raise FileNotFoundError(f'--table={path}: no such file; the published '
                            f'tables are in experiments/paper/.')
  spec = importlib.util.spec_from_file_location('table_spec', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  missing = [name for name in ('TITLE', 'SCALES', 'ROWS', 'COLUMNS', 'NOTES')
             if not hasattr(module, name)]
  if missing:
    raise ValueError(f'{path} does not define {", ".join(missing)}; see the '
                     f'docstring of transformer/reproduce/specs.py.')
  names = [row.name for row in module.ROWS]
  if len(set(names)) != len(names):
    raise ValueError(f'{path}: row names must be unique (they name the '
                     f'workdirs): {names}.')
  return module


def select_rows(spec, selectors: list[str]) -> list[Row]:
  """Rows whose group or name is among `selectors` (all if empty), in the
  table's order."""
  if not selectors:
    return list(spec.ROWS)
  known = {row.group for row in spec.ROWS} | {row.name for row in spec.ROWS}
  unknown = sorted(set(selectors) - known)
  if unknown:
    raise ValueError(f'--rows: unknown {unknown}; groups and rows of this '
                     f'table: {", ".join(sorted(known))}.')
  return [row for row in spec.ROWS
          if row.group in selectors or row.name in selectors]


@dataclasses.dataclass(frozen=True)
class RowSetup:
  """A row at one scale: the config it trains with, the flags that give it
  on a command line, and its model (for settings and parameters). `problem`
  says why the row cannot be trained here; `config` and `model` are then
  what can be built without the missing fields (or None)."""
  row: Row
  experiment: str
  overrides: dict[str, Any]
  config: ml_collections.ConfigDict | None
  model: Any
  problem: str = ''

  def flags(self) -> list[str]:
    """--config=... and one --config.a.b=value per override."""
    return [f'--config={self.experiment}'] + [
        f'--config.{field}={value}' for field, value in self.overrides.items()]


def setup(spec, row: Row, scale: str, extra: str = '') -> RowSetup:
  """The row at `scale` with `extra` ('a.b=v,...', for every row) applied.
  A row setting a field the config does not have is not expressible here:
  reported as such, never trained as something else."""
  if scale not in spec.SCALES:
    raise ValueError(f'--scale={scale}: this table has scales '
                     f'{sorted(spec.SCALES)}.')
  if scale not in row.changes:
    return RowSetup(row, '', {}, None, None, no_equivalent(scale))
  experiment = row.configs.get(scale, spec.SCALES[scale].config)
  overrides = {**spec.SCALES[scale].overrides, **row.changes[scale]}
  extra_flags = configs.parse_assignments(extra)
  shown = {**overrides, **{k: v for k, _, v in (
      item.partition('=') for item in filter(None, extra.split(',')))}}
  try:
    base = configs.load_experiment(experiment)
  except FileNotFoundError as e:  # e.g. the workdir a row fine-tunes from
    return RowSetup(row, experiment, shown, None, None, f'not ready: {e}')
  try:
    config = configs.override(base, overrides)
  except configs.UnknownField as e:
    return RowSetup(row, experiment, shown, None, None,
                    f'not expressible: the {base.task} {e}')
  try:
    config = configs.override(config, extra_flags)
  except configs.UnknownField as e:
    raise ValueError(f'--set={extra}: {e}') from e
  try:
    return RowSetup(row, experiment, shown, config, model_config(config))
  except ValueError as e:  # e.g. d_model not divisible by num_heads
    return RowSetup(row, experiment, shown, config, None, f'invalid: {e}')


def no_equivalent(scale: str) -> str:
  """The problem of a row the spec gives no counterpart at `scale`: the
  table shows it, and it is no error (the paper's row has none here)."""
  return f'no {scale}-scale equivalent in the table spec'


def seed_runs(row_setup: RowSetup, seeds: int) -> list[tuple[str, RowSetup]]:
  """(workdir name, setup) of each of a row's `seeds` runs: the first with
  the row's own config (named as the row, so runs made before seeds keep
  counting), the others with config.seed + 1, + 2, ... (named ROW.seedS,
  their launch commands setting --config.seed)."""
  runs = [(row_setup.row.name, row_setup)]
  if row_setup.problem or row_setup.config is None:
    return runs
  for offset in range(1, seeds):
    seed = row_setup.config.seed + offset
    runs.append((f'{row_setup.row.name}.seed{seed}', dataclasses.replace(
        row_setup, config=configs.override(row_setup.config, {'seed': seed}),
        overrides={**row_setup.overrides, 'seed': seed})))
  return runs


def model_config(config: ml_collections.ConfigDict) -> Any:
  """The model dataclass a row's config trains (vocabulary as configured:
  a tokenizer trained on the data may come out a little smaller)."""
  if config.task == 'text_classification':
    spec = glue.spec(config.data.glue_task) if config.data.glue_task else None
    return encoder.config_for(
        config.model.size, vocab_size=config.data.vocab_size + 1,
        max_length=config.data.max_length,
        num_classes=spec.num_classes if spec else config.data.num_classes,
        **configs.model_overrides(config.model, encoder.Config,
                                  text_classification.MODEL_EXCLUDE))
  return translation.model_config(config, config.data.vocab_size)


def parameters(config_model) -> int:
  """Exact parameter count of a model dataclass, from shapes alone."""
  if isinstance(config_model, encoder.Config):
    return encoder.param_count(config_model, 'classify')
  return encoder_decoder.param_count(config_model)


def settings(row_setup: RowSetup) -> dict[str, Any]:
  """The hyperparameters of the paper's tables, as this row sets them."""
  m = row_setup.model
  if m is None:
    return {}
  if isinstance(m, encoder.Config):
    data, train = row_setup.config.data, row_setup.config.train
    metric = (glue.spec(data.glue_task).metrics[0] if data.glue_task
              else 'accuracy')
    return dict(task=data.glue_task, metric=metric, source=data.source,
                eval_split=data.eval_split, steps=train.num_steps,
                init_from=train.init_from or 'scratch', N=m.num_layers,
                d_model=m.d_model, h=m.num_heads)
  d_k = m.head_dim or m.d_model // m.num_heads
  train, evaluation = row_setup.config.train, row_setup.config.eval
  return dict(N=m.num_layers, d_model=m.d_model, d_ff=m.mlp_dim,
              h=m.num_heads, d_k=d_k, d_v=m.value_head_dim or d_k,
              P_drop=m.dropout_rate, eps_ls=train.label_smoothing,
              positions=m.positional_encoding, vocab=m.vocab_size,
              steps=train.num_steps, beam=evaluation.beam_size,
              alpha=evaluation.length_penalty,
              max_output=f'input + {evaluation.max_length_offset}',
              averaged=evaluation.average_checkpoints,
              eval_split=row_setup.config.data.eval_split)
