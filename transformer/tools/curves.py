"""Training curves of one or more runs, read from their workdirs.

    python -m transformer.tools.curves --workdirs=W0,W1 --output=curves.png
    python -m transformer.tools.curves --workdirs=W0,W1 --labels="seed 0,seed 1" \
        --tags="train/loss,eval/bleu,eval/perplexity" --output=curves.png

Reads the TensorBoard scalars every run writes (`metrics.read_events`,
each record checked; a resumed run's event files together) and draws one
panel per tag, one line per run, over training steps: the curve of a
result, its seeds overlaid,
without starting TensorBoard. A run's evaluation of averaged checkpoints
(`eval_averaged/NAME`) is drawn as a star on the panel of `eval/NAME`.
Prints each tag's last value per run, with the mean and range over the runs
(an evaluation's last value is the one at the run's last evaluated step).
--tags takes shell-style patterns (`eval/*`); the figure is refused before
any reading if it is already there, unless --overwrite. Each event record
is checked against its CRCs: a last record cut short (a run killed while
writing it) is left out with a note, and a damaged record stops the
command with one line naming the file, the record's byte offset and what
to do.
"""

from __future__ import annotations

import fnmatch
import sys

from absl import flags

from transformer import metrics
from transformer.insight import plots
from transformer import storage
from transformer.tools import cli

AVERAGED = 'eval_averaged/'


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_list('workdirs', None, 'Workdirs of the runs, comma-separated.',
                    required=True)
  flags.DEFINE_list('labels', None, 'A legend label per workdir (default: '
                    'the workdirs\' folder names); a label with a comma in '
                    'double quotes: --labels=\'"4,000 steps",b\'.')
  flags.DEFINE_list('tags', ['train/loss', 'eval/*'], 'Scalars to draw, one '
                    'panel each: names or shell-style patterns.')
  flags.DEFINE_string('output', None, 'The figure to write (PNG, SVG, PDF).',
                      required=True)
  cli.define_overwrite_flag()


def _check(workdirs: list[str], labels: list[str] | None) -> list[str]:
  """The runs' labels; refuses workdirs without scalars and mismatched
  labels, before anything is drawn."""
  if not workdirs:
    raise ValueError('--workdirs: give at least one workdir.')
  given = labels is not None
  if not given:
    labels = [storage.path(w.rstrip('/')).name or w for w in workdirs]
  if len(labels) != len(workdirs):
    raise ValueError(f'--labels: {len(labels)} labels for {len(workdirs)} '
                     f'workdirs; give one per workdir, in the same order '
                     f'(a label with a comma in double quotes: '
                     f'--labels=\'"4,000 steps",b\').')
  if len(set(labels)) != len(labels):
    named = '--labels' if given else 'the workdirs\' folder names'
    raise ValueError(f'{named}: {labels} repeats a label; give each run its '
                     f'own (--labels="seed 0,seed 1").')
  for workdir in workdirs:
    if not storage.exists(workdir):
      raise FileNotFoundError(f'--workdirs: {workdir} does not exist.')
  return labels


def read(workdirs: list[str], labels: list[str] | None = None
         ) -> dict[str, dict[str, dict[int, float]]]:
  """{label: {tag: {step: value}}} of each workdir's scalars; a line on
  stderr for each event file whose last record is cut short (read without
  it), and `metrics.DamagedEventFile` for one damaged."""
  labels = _check(workdirs, labels)
  runs = {}
  for label, workdir in zip(labels, workdirs):
    events = metrics.read_events(workdir)
    for line in events.cut_short:
      print(f'Note: {line}', file=sys.stderr, flush=True)
    runs[label] = events.scalars
    if not runs[label]:
      raise ValueError(f'--workdirs: {workdir} has no TensorBoard scalars '
                       f'(events.out.tfevents.*); train into it first.')
  return runs


def select(runs: dict[str, dict[str, dict[int, float]]],
           patterns: list[str]) -> list[str]:
  """The tags of any run matching `patterns`, in the patterns' order
  (sorted within a pattern), averaged evaluations left to their eval
  panel. Refuses a pattern that matches nothing, naming the tags there
  are."""
  present = sorted({t for scalars in runs.values() for t in scalars})
  if not patterns:
    raise ValueError('--tags is empty: name the scalars to draw, e.g. '
                     '--tags=train/loss,eval/* (the default).')
  tags = []
  for pattern in patterns:
    matched = [t for t in fnmatch.filter(present, pattern)
               if not t.startswith(AVERAGED) or pattern == t]
    if not matched:
      raise ValueError(f'--tags: {pattern!r} matches no scalar of these '
                       f'runs; they have {", ".join(present)}.')
    tags += [t for t in matched if t not in tags]
  return tags


def averaged_tag(tag: str) -> str | None:
  """The averaged checkpoints' evaluation of an evaluation tag
  ('eval/bleu' -> 'eval_averaged/bleu'); None for other tags."""
  return AVERAGED + tag[len('eval/'):] if tag.startswith('eval/') else None


def last_values(runs: dict[str, dict[str, dict[int, float]]], tag: str
                ) -> dict[str, float]:
  """Each run's value of `tag` at its last step (runs without it left
  out)."""
  return {label: scalars[tag][max(scalars[tag])]
          for label, scalars in runs.items() if scalars.get(tag)}


def table(runs: dict[str, dict[str, dict[int, float]]],
          tags: list[str]) -> str:
  """Each tag's last value per run, then their mean and range."""
  labels = list(runs)
  rows = list(tags)
  rows += [a for a in map(averaged_tag, tags)
           if a and any(a in scalars for scalars in runs.values())]
  width = max(len(r) for r in rows)
  # A label longer than a number widens its column, so values stay under it.
  columns = {label: max(12, len(label)) for label in labels}
  lines = [f'{"last value":<{width}}  ' + '  '.join(
      f'{label:>{columns[label]}}' for label in labels)
           + f'  {"mean":>10}  {"range":>19}']
  for tag in rows:
    values = last_values(runs, tag)
    cells = '  '.join(f'{values[l]:>{columns[l]}.4g}' if l in values
                      else f'{"-":>{columns[l]}}' for l in labels)
    numbers = list(values.values())
    summary = (f'  {sum(numbers) / len(numbers):>10.4g}  '
               f'{min(numbers):>9.4g}-{max(numbers):<9.4g}'
               if len(numbers) > 1 else '')
    lines.append(f'{tag:<{width}}  {cells}{summary}')
    steps = {l: max(runs[l][tag]) for l in values}
    if len(set(steps.values())) > 1:
      lines.append('  (at steps ' + ', '.join(
          f'{l}: {s:,}' for l, s in steps.items()) + ')')
  return '\n'.join(lines)


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  outputs = [cli.Output('--output', args.output)]
  cli.check_outputs(outputs, overwrite=args.overwrite)
  runs = read(args.workdirs, args.labels)
  tags = select(runs, args.tags)
  print(table(runs, tags), flush=True)
  with cli.Writing(outputs, overwrite=args.overwrite) as writing:
    plots.plot_runs(runs, tags, writing.path(args.output),
                    marked={t: averaged_tag(t) for t in tags
                            if averaged_tag(t)})
  print(f'Written: {args.output}', file=sys.stderr)


def run() -> None:
  """The `transformer-curves` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
