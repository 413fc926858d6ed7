"""A reproduced table as markdown and CSV: our values beside the paper's,
with the scale and the command that produced them stated above it."""

from __future__ import annotations

import csv
import io
import statistics
from typing import Any, Sequence

from transformer import storage
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


# The column sources whose values come from a run (`_ours`).
_RESULTS = ('metric', 'row_metric', 'hours')


def _over_seeds(values: Sequence[Any]) -> tuple[Any, float | None]:
  """(mean, sample standard deviation) of the seeds' values that exist;
  the deviation is None for fewer than two, the mean None for none."""
  present = [v for v in values if v is not None]
  if len(present) < 2:
    return (present[0] if present else None), None
  return statistics.fmean(present), statistics.stdev(present)


def _row_outcome(runs: Sequence[outcomes.Outcome]) -> outcomes.Outcome:
  """One status for a row's runs: finished when every seed is, else the
  first unfinished seed's status, with how many finished."""
  waiting = [o for o in runs if o.status != 'finished']
  if len(runs) == 1 or not waiting:
    return runs[0] if len(runs) == 1 else outcomes.Outcome('finished')
  done = len(runs) - len(waiting)
  detail = f'{done} of {len(runs)} seeds finished'
  if waiting[0].detail:
    detail += f'; {waiting[0].detail}'
  return outcomes.Outcome(waiting[0].status, detail=detail)


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
          results: Sequence[Sequence[outcomes.Outcome]], workdir: str, *,
          extra: str, about: str, seeds: int = 1) -> str:
  """Writes WORKDIR/table.md and WORKDIR/table.csv; returns the markdown.
  `results` holds each row's runs, one per seed; with several, a result
  cell is the mean over the finished seeds +- their standard deviation,
  and the CSV keeps each seed's value."""
  params = [specs.parameters(s.model) if s.model is not None else None
            for s in setups]
  header = ['row']
  for column in spec.COLUMNS:
    header += [column.title] + (['paper'] if column.paper else [])
  header += ['seeds'] * (seeds > 1) + ['status']
  table_rows, csv_rows = [], []
  for setup, runs, count in zip(setups, results, params):
    outcome = _row_outcome(runs)
    cells, record = [setup.row.label], {
        'row': setup.row.name, 'label': setup.row.label,
        'status': outcome.status, 'detail': outcome.detail,
        'params_exact': count}
    for column in spec.COLUMNS:
      # Results differ from seed to seed; settings and parameters do not.
      result = column.source.split(':')[0] in _RESULTS
      values = [_ours(column, setup, run, count)
                for run in (runs if result else runs[:1])]
      values = [v * column.scale if isinstance(v, (int, float))
                and column.scale != 1 else v for v in values]
      ours, spread = _over_seeds(values)
      cells.append(_text(ours, column.digits) + (
          f' ± {_text(spread, column.digits)}' if spread is not None
          else ''))
      record[column.key] = ours
      if result and len(runs) > 1:
        record[f'{column.key}_std'] = spread
        record[f'{column.key}_per_seed'] = ';'.join(
            '' if v is None else f'{v:g}' for v in values)
      if column.paper:
        cells.append(_text(setup.row.paper.get(column.key), 0))
        record[f'{column.key}_paper'] = setup.row.paper.get(column.key)
    if seeds > 1:
      finished = sum(run.status == 'finished' for run in runs)
      cells.append(f'{finished}/{len(runs)}')
      record['seeds_finished'] = finished
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
           'published values.' + (
               f' {seeds} runs per row (seeds config.seed, +1, ...): a '
               'result is their mean ± standard deviation over the '
               'finished ones.' if seeds > 1 else ''), '',
           '| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(cells) + ' |' for cells in table_rows]
  lines += ['', spec.NOTES.strip()]
  text = '\n'.join(lines) + '\n'
  storage.write_atomically(storage.join(workdir, 'table.md'), text)
  table = io.StringIO(newline='')
  writer = csv.DictWriter(table, fieldnames=list(dict.fromkeys(
      k for r in csv_rows for k in r)))
  writer.writeheader()
  writer.writerows(csv_rows)
  storage.write_atomically(storage.join(workdir, 'table.csv'),
                           table.getvalue())
  return text


def rows_without_result(workdir: str,
                        scale: str) -> list[tuple[str, str, str]]:
  """(row, status, detail) of each row WORKDIR/table.csv records without
  a result (failed, invalid, not expressible, not ready, not run,
  unfinished or finished with another config), in the table's order. A
  row the spec gives no equivalent at `scale` is not among them: the
  table says so, and no run would give it one."""
  table = storage.read_text(storage.join(workdir, 'table.csv'))
  return [(record['row'], record['status'], record['detail'])
          for record in csv.DictReader(io.StringIO(table, newline=''))
          if record.get('status') not in ('finished',
                                          specs.no_equivalent(scale))]
