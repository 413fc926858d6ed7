"""The results registry: every measured figure the docs show, as data.

    python -m transformer.tools.results record --row=ROW --metric=NAME \
        --workdir=W [--scalar=eval/bleu --scale=1 --seed=S --note=...]
    python -m transformer.tools.results record --row=ROW --metric=NAME \
        --value=X --command="python benchmarks/..." [--note=...]
    python benchmarks/attention.py | python -m transformer.tools.results \
        capture --table=NAME --command="python benchmarks/attention.py" \
        [--describes=benchmarks/attention.py]
    python -m transformer.tools.results render
    python -m transformer.tools.results render --check

The registry is docs/results/*.json, one file per row of a results
table: what was run (task, model, the command), the experiment file it
describes, and its records. A record is one metric over the runs made:
each run's value, seed, commit, date and machine, and its note (threads,
whether the machine was shared). `record` appends a run: from a
workdir's last logged value of a scalar, or a value given (benchmark
output); the commit, date and machine are this checkout's and this
machine's.

A measured table that is not one figure per row (a benchmark's printed
output, a curve by step, a grid of heads) is a table file,
docs/results/tables/NAME.json: its cells or its printed output, the
command, the machine, the commit and the date. `capture` stores a
command's output read from stdin, measured now on this machine; a table
typed into the docs before the registry existed keeps the commit that
put it there (`"source": "typed"`) and is marked history.

`render` writes each table into the Markdown files between its markers
(`last_known_good`: the commits whose whole CI run passed,
docs/results/_last_known_good.json):

    <!-- results: TABLE -->
    ...rendered rows...
    <!-- /results -->

(the rows of every registry file that lists TABLE; for `table:NAME`, the
table file NAME with where and when it was measured), and each figure in
prose, `<!-- figure: ROW/METRIC -->...<!-- /figure -->` or `<!-- figure:
table:NAME|ROW|COLUMN -->...<!-- /figure -->`, so a figure is typed
once. `render --check` (tests/tools/test_results.py) fails when a
rendered table differs from the registry, when a figure is typed outside
it (`typed_figures`), or when a row's experiment
file changed (its code; docstrings and comments aside) since its records
were made and it is not marked `history`: the figure would describe code
that no longer exists.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
from typing import Any, Sequence

from absl import flags

from transformer import metrics
from transformer.plan import scaling
from transformer.reproduce import rows as rows_lib
from transformer.tools import cli
from transformer.tools import typed_figures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REGISTRY = os.path.join(REPO, 'docs', 'results')
# The Markdown files tables are rendered into.
PAGES = ('README.md', 'docs/*.md')
ACTIONS = ('record', 'capture', 'render')
_MARKER = re.compile(
    r'(<!-- results: ([\w:-]+) -->\n)(.*?)(<!-- /results -->)', re.DOTALL)
TABLE_PREFIX = 'table:'
KNOWN_GOOD = '_last_known_good.json'
HEADER = ('| task | model | command | result |\n'
          '|---|---|---|---|\n')


# -- The registry -------------------------------------------------------------


def rows() -> dict[str, dict[str, Any]]:
  """{row name: its registry file's content}, checked."""
  if not os.path.isdir(REGISTRY):
    raise FileNotFoundError(
        f'No results registry at {REGISTRY}: the command works in a checkout '
        f'of the repository (its docs/results/), not an installed package.')
  found = {}
  for path in sorted(glob.glob(os.path.join(REGISTRY, '*.json'))):
    name = os.path.splitext(os.path.basename(path))[0]
    if name.startswith('_'):  # not a row: the last-known-good commits
      continue
    with open(path, encoding='utf-8') as f:
      try:
        row = json.load(f)
      except json.JSONDecodeError as e:
        raise ValueError(f'{path} is not valid JSON ({e}).') from e
    _check_row(row, path)
    found[name] = row
  return found


_ROW_FIELDS = ('task', 'model', 'command', 'tables', 'records')
_RUN_FIELDS = ('value', 'seed', 'commit', 'date', 'machine')


def _check_row(row: Any, path: str) -> None:
  missing = [k for k in _ROW_FIELDS if k not in row]
  if missing:
    raise ValueError(f'{path} lacks {missing}: a row holds '
                     f'{", ".join(_ROW_FIELDS)}.')
  for record in row['records']:
    for run in record.get('runs', ()):
      lacking = [k for k in _RUN_FIELDS if k not in run]
      if lacking:
        raise ValueError(f'{path}: a run of {record.get("metric")!r} lacks '
                         f'{lacking}: each run holds '
                         f'{", ".join(_RUN_FIELDS)}.')


def code_digest(path: str) -> str:
  """A digest of a Python file's code, docstrings and comments left out:
  what a figure describes, which a reworded docstring does not change."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    body = getattr(node, 'body', None)
    if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)):
      body[0] = ast.Pass()
  return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def _outdated(entry: dict[str, Any], label: str, codes: list[Any],
              again: str) -> str | None:
  """Why figures measured on `codes` (digests of the file `entry`
  describes) no longer describe it; None if they do, or are history.
  `again` says how to measure them anew."""
  if entry.get('history') or not entry.get('describes'):
    return None
  path = os.path.join(REPO, entry['describes'])
  if not os.path.exists(path):
    return (f'{label}: {entry["describes"]} is gone; {again} or mark it '
            f'"history": true.')
  current = code_digest(path)
  old = sum(code != current for code in codes)
  if not old:
    return None
  runs = 'its run was' if len(codes) == 1 else f'{old} of its runs were'
  return (f'{label}: the code of {entry["describes"]} changed since {runs} '
          f'recorded; {again} or mark it "history": true.')


def stale(row: dict[str, Any], name: str) -> str | None:
  """Why a row's figures no longer describe the code (None if they do):
  its experiment file's code changed since they were recorded."""
  codes = [run.get('code', row.get('code')) for record in row['records']
           for run in record['runs']]
  return _outdated(row, name, codes, 'measure them again (`results record`, '
                   'then delete the old runs)')


# -- Tables -------------------------------------------------------------------

_TABLE_FIELDS = ('command', 'machine', 'commit', 'date')


def tables_folder() -> str:
  return os.path.join(REGISTRY, 'tables')


def table_names() -> list[str]:
  return sorted(os.path.splitext(os.path.basename(path))[0] for path in
                glob.glob(os.path.join(tables_folder(), '*.json')))


def table(name: str) -> dict[str, Any]:
  """The table file NAME (docs/results/tables/NAME.json), checked."""
  path = os.path.join(tables_folder(), f'{name}.json')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'No registry table {path}: capture it (`results capture '
        f'--table={name} --command=...`) or correct the marker\'s name.')
  with open(path, encoding='utf-8') as f:
    try:
      found = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f'{path} is not valid JSON ({e}).') from e
  missing = [k for k in _TABLE_FIELDS if k not in found]
  if missing:
    raise ValueError(f'{path} lacks {missing}: a table holds '
                     f'{", ".join(_TABLE_FIELDS)}.')
  if ('output' in found) == ('rows' in found):
    raise ValueError(f'{path} needs exactly one of "output" (what the '
                     f'command printed) and "rows" (cells under "columns").')
  if 'rows' in found:
    widths = {len(row) for row in found['rows']} - {len(found['columns'])}
    if widths:
      raise ValueError(f'{path}: rows of {sorted(widths)} cells under '
                       f'{len(found["columns"])} columns.')
  return found


def _cells(cells: Sequence[Any]) -> str:
  return '| ' + ' | '.join(str(c).replace('|', '\\|') for c in cells) + ' |\n'


def render_measured(name: str) -> str:
  """A table file as Markdown, with where and when it was measured."""
  found = table(name)
  if 'output' in found:
    body = '```\n' + found['output'].rstrip('\n') + '\n```\n'
  else:
    align = found.get('align') or ['---'] * len(found['columns'])
    body = (_cells(found['columns']) + '|' + '|'.join(align) + '|\n'
            + ''.join(map(_cells, found['rows'])))
  when = (('in the docs since ' if found.get('source') == 'typed' else
           'measured at ') + f'{found["commit"]} ({found["date"]})')
  earlier = ', earlier code' if found.get('history') else ''
  return (body + f'\n*{found["machine"]}; {when}{earlier}; registry '
          f'`tables/{name}`.*\n')


def stale_table(name: str) -> str | None:
  """Why a captured table no longer describes the code it measured."""
  found = table(name)
  return _outdated(found, f'tables/{name}', [found.get('code')],
                   'capture it again')


def capture(name: str, command: str, output: str,
            describes: str | None = None) -> dict[str, Any]:
  """Stores `output`, printed by `command` now on this machine, as the
  table NAME (replacing an earlier capture); returns it."""
  if not output.strip():
    raise ValueError(f'Nothing to capture for {name}: pipe the command\'s '
                     f'output in (`{command} | ... capture`).')
  captured = dict(command=command, machine=machine(), commit=commit(),
                  date=datetime.date.today().isoformat(), source='captured',
                  output=output.rstrip('\n'))
  if describes:
    path = os.path.join(REPO, describes)
    if not os.path.exists(path):
      raise FileNotFoundError(f'--describes={describes}: no such file in '
                              f'{REPO}.')
    if changed_since_commit(describes):
      raise ValueError(f'{describes} has changes not committed: commit it '
                       f'first, so that the table names the code it '
                       f'measured.')
    captured.update(describes=describes, code=code_digest(path))
  os.makedirs(tables_folder(), exist_ok=True)
  with open(os.path.join(tables_folder(), f'{name}.json'), 'w',
            encoding='utf-8') as f:
    f.write(json.dumps(captured, indent=2, ensure_ascii=False) + '\n')
  return captured


# -- Figures outside the registry ---------------------------------------------

# Blocks other commands write from their own data, checked here as well:
# the scaling page's plans (docs/scaling.json, `transformer-plan --table`).
GENERATED = ((scaling.BEGIN, scaling.END),)
SCALING_PAGE = os.path.join('docs', 'scaling.md')
NOT_MEASURED = typed_figures.NOT_MEASURED


def typed_tables(text: str) -> list[int]:
  """Line numbers of tables of figures typed outside the registry."""
  return typed_figures.tables(text, GENERATED)


def typed_prose(text: str) -> list[tuple[int, str]]:
  """(line, figure) of each figure typed into prose outside the registry."""
  return typed_figures.prose(text, GENERATED)


# -- Rendering ----------------------------------------------------------------


def _number(value: float, digits: int) -> str:
  """`value` rounded half up at its shortest decimal form: the mean of
  42.64 and 41.83, 42.235 (42.23499... as a float), shows as 42.24."""
  exact = decimal.Decimal(repr(float(value))).quantize(
      decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP)
  return f'{exact:,.{digits}f}'


def parts(record: dict[str, Any]) -> dict[str, str]:
  """A record's figures as shown: 'range' (min to max, or the one value),
  'mean', 'min', 'max' (with its digits and unit) and 'runs' (how many)."""
  values = [run['value'] for run in record['runs']]
  shown = lambda v: (_number(v, record.get('digits', 2))
                     + record.get('unit', ''))
  low, high = shown(min(values)), shown(max(values))
  return dict(range=low if len(values) == 1 else f'{low} to {high}',
              mean=shown(sum(values) / len(values)), min=low, max=high,
              runs=str(len(values)))


def result(record: dict[str, Any]) -> str:
  """A record as a table cell: 'BLEU 98.93 to 99.95 (mean 99.55; 6
  runs: 3 seeds x 1 or 2 threads)', or the one value of one run."""
  shown = parts(record)
  text = f'{record["metric"]} {shown["range"]}'
  over = record.get('over')
  if shown['runs'] == '1':
    return text + (f' ({over})' if over else '')
  return (text + f' (mean {shown["mean"]}; {shown["runs"]} runs'
          + (f': {over})' if over else ')'))


def render_row(row: dict[str, Any]) -> str:
  text = '; '.join(result(r) for r in row['records'])
  if row.get('history'):  # figures of earlier code say which
    runs = [run for r in row['records'] for run in r['runs']]
    each = lambda key: ', '.join(dict.fromkeys(run[key] for run in runs))
    text += (f'; measured at {each("commit")} on {each("machine")} '
             f'({each("date")})')
  if row.get('note'):
    text += f'; {row["note"]}'
  cells = [row['task'], row['model'], f'`{row["command"]}`', text]
  return '| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |\n'


def render_known_good() -> str:
  """The table of last-known-good commits (big_vision keeps one): each
  commit whose whole CI run passed on a fresh clone."""
  with open(os.path.join(REGISTRY, KNOWN_GOOD), encoding='utf-8') as f:
    entries = json.load(f)
  return ('| commit | date | passed |\n|---|---|---|\n' + ''.join(
      f'| {e["commit"]} | {e["date"]} | {e["passed"]} |\n' for e in entries))


def render_table(table: str, registry: dict[str, dict[str, Any]]) -> str:
  if table == 'last_known_good':
    return render_known_good()
  if table.startswith(TABLE_PREFIX):
    return render_measured(table[len(TABLE_PREFIX):])
  chosen = [row for _, row in sorted(
      registry.items(), key=lambda item: (item[1].get('order', 0), item[0]))
            if table in row['tables']]
  if not chosen:
    raise ValueError(f'No registry row lists the table {table!r} '
                     f'({REGISTRY}); add it to a row\'s "tables".')
  return HEADER + ''.join(map(render_row, chosen))


def _markdown_tables(output: str) -> list[tuple[list[str], list[list[str]]]]:
  """The Markdown tables in a command's printed output: (header, rows)."""
  split = lambda line: [c.strip() for c in line.strip().strip('|').split('|')]
  lines = output.split('\n')
  found = []
  for i, line in enumerate(lines[:-1]):
    if (line.startswith('|') and lines[i + 1].startswith('|')
        and set(lines[i + 1].strip()) <= set('|-: ')):
      body = typed_figures.following(lines, i + 2,
                                     lambda l: l.startswith('|'))
      found.append((split(line), [split(l) for l in body]))
  return found


def _cell(name: str, row_key: str, column: str) -> str:
  """The cell of table NAME in the row whose first cell is `row_key`, under
  the header `column` (a printed output's Markdown tables as well)."""
  found = table(name)
  grids = ([(found['columns'], found['rows'])] if 'rows' in found
           else _markdown_tables(found['output']))
  for header, rows in grids:
    for cells in rows:
      if (column in header and str(cells[0]).strip('`*') == row_key
          and header.index(column) < len(cells)):
        return str(cells[header.index(column)])
  raise ValueError(f'tables/{name} has no cell |{row_key}|{column}: name '
                   f'a row by its first cell and a column by its header.')


_PARTS = ('range', 'mean', 'min', 'max', 'runs', 'result')


def figure(ref: str, registry: dict[str, dict[str, Any]]) -> str:
  """The text of an inline figure: `table:NAME|ROW|COLUMN` (a table
  file's cell), or `ROW/METRIC[/PART]` (a row's record: its range over
  the runs, or PART: mean, min, max, runs, result)."""
  cell = re.fullmatch(r'table:([\w-]+)\|(.+?)\|(.+)', ref)
  if cell:
    return _cell(*cell.groups())
  name, metric, part = (ref.split('/') + ['range'])[:3]
  if name not in registry or part not in _PARTS:
    raise ValueError(f'Inline figure {ref!r}: name a registry row and its '
                     f'metric (ROW/METRIC[/{"|".join(_PARTS)}]) or a table '
                     f'cell (table:NAME|ROW|COLUMN).')
  records = [r for r in registry[name]['records'] if r['metric'] == metric]
  if not records:
    raise ValueError(f'Inline figure {ref!r}: {name} records no {metric!r}.')
  if part == 'result':
    return result(records[0])
  return parts(records[0])[part]


def rendered(text: str, registry: dict[str, dict[str, Any]]) -> str:
  """`text` with each marked table and inline figure rendered from the
  registry."""
  text = _MARKER.sub(lambda m: m.group(1) + render_table(m.group(2), registry)
                     + m.group(4), text)
  return typed_figures.render_inline(text, lambda ref: figure(ref, registry))


def with_scaling_plans(text: str) -> str:
  """The scaling page with its block written from docs/scaling.json, as
  `transformer-plan --table=docs/scaling.md --render` writes it."""
  path = os.path.join(REPO, os.path.splitext(SCALING_PAGE)[0] + '.json')
  with open(path, encoding='utf-8') as f:
    return scaling.in_page(text, scaling.markdown(json.load(f)))


def pages() -> list[str]:
  return sorted({path for pattern in PAGES
                 for path in glob.glob(os.path.join(REPO, pattern))})


def render(check: bool = False) -> list[str]:
  """Renders every marked table; with `check`, writes nothing and returns
  the problems (tables out of date, stale rows)."""
  registry = rows()
  problems = [p for name, row in registry.items()
              if (p := stale(row, name))]
  problems += [p for name in table_names() if (p := stale_table(name))]
  shown = set()
  for path in pages():
    with open(path, encoding='utf-8') as f:
      text = f.read()
    shown.update(m.group(2)[len(TABLE_PREFIX):] for m in _MARKER.finditer(
        text) if m.group(2).startswith(TABLE_PREFIX))
    shown.update(m.group(1)[len(TABLE_PREFIX):].split('|')[0]
                 for m in typed_figures.figures(text)
                 if m.group(1).startswith(TABLE_PREFIX))
    problems += [
        f'{os.path.relpath(path, REPO)}:{line}: a table of figures outside '
        f'the registry: capture it (`results capture`) and mark it '
        f'<!-- results: {TABLE_PREFIX}NAME -->, or declare it '
        f'{NOT_MEASURED} why -->' for line in typed_tables(text)]
    problems += [
        f'{os.path.relpath(path, REPO)}:{line}: {figure!r} typed into prose: '
        f'render it from the registry (<!-- figure: ROW/METRIC -->'
        f'<!-- /figure --> or table:NAME|ROW|COLUMN), point to the table, '
        f'or declare the paragraph {NOT_MEASURED} why -->'
        for line, figure in typed_prose(text)]
    problems += [
        f'{os.path.relpath(path, REPO)}:{line}: a line begins with an inline '
        f'figure, which Markdown reads as an HTML block that breaks the '
        f'paragraph: put a word before it' for line in
        typed_figures.figures_opening_lines(text)]
    new = rendered(text, registry)
    if os.path.relpath(path, REPO) == SCALING_PAGE:
      new = with_scaling_plans(new)
    if new == text:
      continue
    if check:
      problems.append(f'{os.path.relpath(path, REPO)} differs from the '
                      f'registry: run python -m transformer.tools.results '
                      f'render')
    else:
      with open(path, 'w', encoding='utf-8') as f:
        f.write(new)
  problems += [f'tables/{name} is shown on no page: mark it where it '
               f'belongs (<!-- results: {TABLE_PREFIX}{name} -->) or delete '
               f'it' for name in sorted(set(table_names()) - shown)]
  return problems


# -- Recording ----------------------------------------------------------------


def machine() -> str:
  """What the figure was measured on, as the paper tables name it
  (`reproduce.rows.hardware`: 'CPU (2 cores, AMD EPYC ...)', '8 x H100')."""
  return rows_lib.hardware()


def commit() -> str:
  try:
    return subprocess.run(['git', 'rev-parse', '--short=10', 'HEAD'],
                          cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return 'unknown'


def changed_since_commit(path: str) -> bool:
  """Whether `path` (from the checkout's root) differs from HEAD's."""
  try:
    return subprocess.run(['git', 'diff', '--quiet', 'HEAD', '--', path],
                          cwd=REPO, capture_output=True,
                          check=False).returncode == 1
  except OSError:
    return False


def last_value(workdir: str, scalar: str) -> float:
  """The last logged value of `scalar` in a workdir's event files."""
  scalars = metrics.read_scalars(workdir)
  if scalar not in scalars:
    raise ValueError(f'{workdir} logged no {scalar!r}; it has '
                     f'{sorted(scalars)[:20]}.')
  steps = scalars[scalar]
  return steps[max(steps)]


def record(name: str, metric: str, value: float, *, seed: int | None,
           note: str = '', command: str | None = None) -> dict[str, Any]:
  """Appends a run of `metric` to the row `name` (the row's code digest
  taken now); returns the row."""
  path = os.path.join(REGISTRY, f'{name}.json')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'No registry row {path}: write it first (task, model, command, '
        f'describes, tables; see an existing one), then record into it.')
  row = rows()[name]
  if command and command != row['command']:
    raise ValueError(f'--command differs from the row\'s {row["command"]!r}'
                     f': a row is one command.')
  found = [r for r in row['records'] if r['metric'] == metric]
  entry = found[0] if found else {'metric': metric, 'runs': []}
  if not found:
    row['records'].append(entry)
  code = ({'code': code_digest(os.path.join(REPO, row['describes']))}
          if row.get('describes') else {})
  entry['runs'].append(dict(
      value=value, seed=seed, commit=commit(),
      date=datetime.date.today().isoformat(), machine=machine(), **code,
      **({'note': note} if note else {})))
  with open(path, 'w', encoding='utf-8') as f:
    f.write(json.dumps(row, indent=2, ensure_ascii=False) + '\n')
  return row


# -- The command --------------------------------------------------------------


def define_flags() -> None:
  flags.DEFINE_string('row', None, 'The registry row (docs/results/ROW.json).')
  flags.DEFINE_string('metric', None, 'The metric as the table shows it, '
                      'e.g. BLEU.')
  flags.DEFINE_string('workdir', None, 'Read the value from this workdir.')
  flags.DEFINE_string('scalar', None, 'Its scalar (default eval/METRIC, '
                      'lower-cased).')
  flags.DEFINE_float('scale', 1.0, 'Multiply the value (100: a fraction '
                     'as a percentage).')
  flags.DEFINE_float('value', None, 'The value itself (benchmark output).')
  flags.DEFINE_integer('seed', None, 'The run\'s seed.')
  flags.DEFINE_string('note', '', 'What else describes the run (threads, a '
                      'shared machine).')
  flags.DEFINE_string('command', None, 'The command that produced it '
                      '(checked against the row\'s).')
  flags.DEFINE_string('table', None, 'capture: the table '
                      '(docs/results/tables/TABLE.json).')
  flags.DEFINE_string('describes', None, 'capture: the file whose code the '
                      'table measures (a benchmark); a change to it makes '
                      'the table stale.')
  flags.DEFINE_bool('check', False, 'render: write nothing; fail if a table '
                    'is out of date or a row stale.')


def main(argv: Sequence[str]) -> None:
  words = argv[1:]
  if not words or words[0] not in ACTIONS:
    raise ValueError(f'Say what to do: {" or ".join(ACTIONS)}.')
  cli.no_arguments(words)
  args = flags.FLAGS
  if words[0] == 'render':
    problems = render(check=args.check)
    for problem in problems:
      print(problem, file=sys.stderr)
    if problems:
      sys.exit(cli.RUN_FAILED)
    print('The tables are the registry\'s.' if args.check
          else 'Rendered the tables.')
    return
  if words[0] == 'capture':
    if not args.table or not args.command:
      raise ValueError('capture needs --table and --command (what printed '
                       'the output piped in).')
    capture(args.table, args.command, sys.stdin.read(), args.describes)
    print(f'Captured tables/{args.table}; mark it where it belongs '
          f'(<!-- results: {TABLE_PREFIX}{args.table} -->) and run '
          f'`render`.')
    return
  if not args.row or not args.metric:
    raise ValueError('record needs --row and --metric.')
  if (args.workdir is None) == (args.value is None):
    raise ValueError('Give --workdir (its last logged value) or --value.')
  value = args.value
  if value is None:
    value = args.scale * last_value(
        args.workdir, args.scalar or f'eval/{args.metric.lower()}')
  record(args.row, args.metric, value, seed=args.seed, note=args.note,
         command=args.command)
  print(f'Recorded {args.metric} {value:g} in {args.row}; run `render` to '
        f'update the tables.')


def run() -> None:
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
