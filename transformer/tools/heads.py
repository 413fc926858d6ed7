r"""Which attention heads matter: head importance as Michel et al. 2019
("Are Sixteen Heads Really Better than One?") define it, and the task's
metrics as the least important heads are pruned.

    python -m transformer.tools.heads --workdir=DIR
    python -m transformer.tools.heads --workdir=DIR --steps=5 --batches=20

Importance, patterns and pruning are `transformer.insight.heads`'s (the
method is its docstring's); heads are pruned in steps of 1/--steps of
all heads, and at each step the evaluation the trainer runs (loss
metrics on the evaluation batches, then the task's own: BLEU, accuracy,
...) is recorded.

Writes into --output_dir (default WORKDIR/heads): heads.md (importance,
entropy and distance per layer and head, and the metrics per pruning
step), importance.png, entropy.png, distance.png and pruning.png, and the
reports and plots of each pruned evaluation (reports/, plots/: the
workdir itself is only read). Those already there (an earlier run's) are
refused before any work unless --overwrite (an evaluation's report when
the run ends), and so is a folder that cannot be written; the files
appear when the run ends, or not at all (`cli.Writing`).
`transformer.insight.heads` does the same from python.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from absl import flags
import numpy as np

from transformer import storage
from transformer import train
from transformer import workdir as workdir_lib
from transformer.insight import heads
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('workdir', None, 'A training workdir.', required=True)
  flags.DEFINE_string('output_dir', None, 'Where to write the table and '
                      'plots; default WORKDIR/heads.')
  flags.DEFINE_integer('steps', 10, 'Pruning steps: prune k/steps of all '
                       'heads for k = 0 .. steps - 1.')
  flags.DEFINE_integer('batches', 0, 'Evaluation batches for the '
                       'importance (0: all).')
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  cli.define_overwrite_flag()


class _ReportsInto:
  """A task whose evaluations write their reports and plots (the task's
  `workdir`/reports and /plots) under `folder` instead: the rest, its
  vocabulary and token caches, is the workdir's."""

  def __init__(self, task: Any, folder: str):
    self._task, self._folder = task, folder

  def __getattr__(self, name: str) -> Any:
    return getattr(self._task, name)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    workdir, self._task.workdir = self._task.workdir, self._folder
    try:
      return self._task.evaluate(params, label=label)
    finally:
      self._task.workdir = workdir


def prune_heads(restored: workdir_lib.Restored, importance: np.ndarray, *,
                steps: int = 10, label: str = 'heads',
                reports: str | None = None) -> list[dict[str, float]]:
  """`heads.prune_heads` with the trainer's evaluation of the workdir; the
  reports and plots each evaluation writes go into `reports`/reports and
  `reports`/plots (default: the workdir's)."""
  trainer = train.Trainer(restored.config, restored.task.workdir)
  if reports is not None:
    trainer.task = _ReportsInto(trainer.task, reports)
  return heads.prune_heads(restored.params, importance, trainer.evaluate,
                           steps=steps, label=label)


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  cli.check_flag('steps', args.steps, at_least=1)
  cli.check_flag('batches', args.batches, at_least=0)
  cli.check_flag('average', args.average, at_least=1)
  workdir_lib.load_config(args.workdir)  # a workdir, or a clear error
  folder = args.output_dir or storage.join(args.workdir, 'heads')
  outputs = [cli.Output('--output_dir', os.path.join(folder, name))
             for name in heads.REPORT_FILES]
  cli.check_outputs(outputs, overwrite=args.overwrite)
  # Everything goes under `folder`, the pruned evaluations' reports and
  # plots too (folder/reports, folder/plots): a read-only workdir is read,
  # never written, and a folder that cannot be written fails on entering
  # `Writing`, before any work.
  with cli.Writing(outputs, overwrite=args.overwrite) as writing:
    restored = workdir_lib.restore(args.workdir, average=args.average)
    names, importance = heads.head_importance(restored,
                                             batches=args.batches)
    try:
      patterns = heads.head_patterns(restored, batches=args.batches)
    except ValueError as e:  # importance and pruning still stand
      print(f'No entropy or distance: {e}', file=sys.stderr)
      patterns = None
    # The pruned evaluations' reports go straight to their final place
    # (each file whole): the paths they print are then where they are.
    rows = prune_heads(restored, importance, steps=args.steps,
                       reports=folder)
    report = heads.write_report(names, importance, rows,
                                writing.folder(folder), patterns)
  sys.stdout.write(report)
  written = ['heads.md', 'importance.png', 'pruning.png'] + (
      ['entropy.png', 'distance.png'] if patterns else [])
  print(f'Written into {folder}: {", ".join(written)} and the evaluations\' '
        f'reports/ and plots/ (checkpoint of step {restored.step}).',
        file=sys.stderr)


def run() -> None:
  """The `transformer-heads` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
