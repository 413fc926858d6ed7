"""A reproduced table as markdown and CSV: our values beside the paper's,
with the scale and the command that produced them stated above it."""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

from transformer.reproduce import outcomes
from transformer.reproduce import specs


def _ours(column: specs.Column, setup: specs.RowSetup,
          outcome: outcomes.Outcome, params: int | None) -> Any:
  """Our value of one cell (None: nothing to show)."""
  kind, _, name = column.source.partition(':')
  if kind == 'setting':
    return specs.settings(setup).get(name)
  if kind == 'params':
    return None if params is None else params / 1e6
  if outcome.status != 'finished':
    return None  # a part-way value would read as a result
  if kind == 'metric':
    return outcome.metrics.get(name)
  if kind == 'row_metric':
    return outcome.metrics.get(setup.row.metric)
  if kind == 'hours':
    return outcome.seconds / 3600
  raise ValueError(f'Column {column.key}: unknown source {column.source!r}; '
                   f"use 'setting:NAME', 'metric:TAG', 'row_metric', 'params' "
                   f"or 'hours'.")


def _text(value: Any, digits: int) -> str:
  if value is None or value == '':
    return ''
  if isinstance(value, float) and not value.is_integer():
    return f'{value:.{digits}f}' if digits else f'{value:g}'
  if isinstance(value, float):
    return f'{value:.{digits}f}' if digits else f'{int(value)}'
  if isinstance(value, int) and value >= 10_000:
    return f'{value:,}'
  return str(value)


def _status(outcome: outcomes.Outcome) -> str:
  detail = outcome.detail.replace('|', '/')
  if len(detail) > 120:
    detail = detail[:117] + '...'
  return f'{outcome.status}: {detail}' if detail else outcome.status


def _average_row(spec, keys: Sequence[str], records: Sequence[dict],
                 header: Sequence[str]) -> list[str]:
  """The mean of columns `keys` over every row and column, ours and the
  paper's apart (as GLUE's score averages its tasks' scores); blank where a
  cell is missing."""
  def mean(suffix: str) -> str:
    values = [r.get(f'{key}{suffix}') for r in records for key in keys
              if not (r.get(f'{key}_paper') in (None, '') and
                      r.get(key) in (None, ''))]
    if not values or any(v in (None, '') for v in values):
      return ''
    return f'{sum(float(v) for v in values) / len(values):.1f}'
  cells = ['average'] + [''] * (len(header) - 1)
  position = 1
  for column in spec.COLUMNS:
    if column.key == keys[0]:
      cells[position] = mean('')
      if column.paper:
        cells[position + 1] = mean('_paper')
    position += 2 if column.paper else 1
  return cells


def write(spec, scale: str, setups: Sequence[specs.RowSetup],
          results: Sequence[outcomes.Outcome], workdir: str, *,
          extra: str, about: str) -> str:
  """Writes WORKDIR/table.md and WORKDIR/table.csv; returns the markdown."""
  params = [specs.parameters(s.model) if s.model is not None else None
            for s in setups]
  header = ['row']
  for column in spec.COLUMNS:
    header += [column.title] + (['paper'] if column.paper else [])
  header.append('status')
  table_rows, csv_rows = [], []
  for setup, outcome, count in zip(setups, results, params):
    cells, record = [setup.row.label], {
        'row': setup.row.name, 'label': setup.row.label,
        'status': outcome.status, 'detail': outcome.detail,
        'params_exact': count}
    for column in spec.COLUMNS:
      ours = _ours(column, setup, outcome, count)
      if isinstance(ours, (int, float)) and column.scale != 1:
        ours *= column.scale
      cells.append(_text(ours, column.digits))
      record[column.key] = ours
      if column.paper:
        cells.append(_text(setup.row.paper.get(column.key), 0))
        record[f'{column.key}_paper'] = setup.row.paper.get(column.key)
    cells.append(_status(outcome))
    table_rows.append(cells)
    csv_rows.append(record)
  averaged = getattr(spec, 'AVERAGE', ())
  if averaged:
    table_rows.append(_average_row(spec, averaged, csv_rows, header))
  vocab = {s.model.vocab_size for s in setups if s.model is not None}
  lines = [f'### {spec.TITLE}', '',
           f'Scale: **{scale}**: {spec.SCALES[scale].about}' + (
               f' Every row also with `{extra}`.' if extra else ''), '',
           about + (' Parameters are exact counts of each row\'s config '
                    f'(jax.eval_shape, no training) at vocabulary '
                    f'{", ".join(f"{v:,}" for v in sorted(vocab))};'
                    if vocab else '') + ' "paper" columns are the '
           'published values.', '',
           '| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(cells) + ' |' for cells in table_rows]
  lines += ['', spec.NOTES.strip()]
  text = '\n'.join(lines) + '\n'
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'table.md'), 'w') as f:
    f.write(text)
  with open(os.path.join(workdir, 'table.csv'), 'w', newline='') as f:
    fields = list(dict.fromkeys(k for r in csv_rows for k in r))
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(csv_rows)
  return text
