r"""Reproduce a published table: run its rows, print their cluster launch
commands, or collect their results, and write our values beside the paper's.

    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table3.py \
        --workdir=workdirs/table3_reduced --scale=reduced [--rows=base,A] \
        [--launch=local|print|collect] [--set=train.num_steps=1000] \
        [--seeds=2] [--parallel=8]

Each row trains into WORKDIR/ROW (rows selected by --rows, by group or
name), and with --seeds=S (or a scale's own number of seeds) S - 1 more
runs with the next seeds into WORKDIR/ROW.seedN; the table then gives each
result as the mean over seeds +- their standard deviation. --launch=local
trains the rows one after another in this process (--parallel=N: N at a
time, each in a process of its own, for small rows on one big GPU); a
finished row is not
trained or evaluated again (its results are read from its workdir), a
failed one is recorded as failed and the next row starts; on SIGTERM the
running row checkpoints and the command exits with status 75 (rerun it to
resume). --launch=print prints one launch/ command
per unfinished row (`sbatch ... launch/slurm_gpu.sbatch`, or with
--launcher=tpu_vm|local the other scripts; --launcher_args adds their
options; one per seed) and trains nothing; once the cluster has run them
into the same workdirs, --launch=collect (which runs nothing) writes the
table. Every mode ends by writing WORKDIR/table.md and WORKDIR/table.csv;
the parameter column is computed from each row's config (jax.eval_shape),
so `--launch=collect` on an empty workdir already gives it. The command
exits 1, after writing the table, when a selected row has no result
(failed, invalid, not expressible, not ready, not run, unfinished, or
finished with another config), naming each with its reason, and all of
them in its last line; --launch=print, when a row cannot run (invalid,
not expressible, not ready). A row the spec gives no equivalent at the
scale is shown as such and is no error.
"""

import shlex
import sys

from absl import flags

from transformer.reproduce import rows as rows_lib
from transformer.reproduce import tables
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('table', None, 'Table spec file, e.g. '
                      'experiments/paper/vaswani2017_table3.py.',
                      required=True)
  flags.DEFINE_string('workdir', None, 'Root of the rows\' workdirs and of '
                      'table.md/table.csv.', required=True)
  flags.DEFINE_string('scale', 'paper', 'A scale of the table spec: paper '
                      '(the published setting) or reduced.')
  flags.DEFINE_list('rows', [], 'Groups or row names (default all), e.g. '
                    'base,A,C.')
  flags.DEFINE_enum('launch', 'local', rows_lib.LAUNCHES, 'local: train here; '
                    'print: print launch commands; collect: only read '
                    'results.')
  flags.DEFINE_string('set', '', 'Overrides for every row, e.g. '
                      'train.num_steps=1000,eval.beam_size=1; stated in the '
                      'table.')
  flags.DEFINE_integer('seeds', None, 'Runs per row, with seeds '
                       'config.seed, +1, ...; the table gives their mean and '
                       'standard deviation. Default: the scale\'s.')
  flags.DEFINE_integer('parallel', 1, 'With --launch=local: rows trained at '
                       'a time, each in a process of its own sharing this '
                       "machine's accelerator (0.9 / N of its memory each).")
  flags.DEFINE_enum('launcher', 'slurm_gpu', rows_lib.LAUNCHERS,
                    'The launch/ script of --launch=print.')
  flags.DEFINE_string(
      'launcher_args', '', 'Words put into every printed command: sbatch '
      'options for slurm_gpu (e.g. "--nodes=1 --gpus-per-node=8"), '
      '"--zone=Z --accelerator_type=T" for tpu_vm, options of local.sh.')


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  text = rows_lib.reproduce(
      args.table, args.workdir, scale=args.scale, rows=args.rows,
      launch=args.launch, extra=args.set, launcher=args.launcher,
      launcher_args=args.launcher_args, seeds=args.seeds,
      parallel=args.parallel,
      command='python -m transformer.tools.reproduce ' +
      shlex.join(sys.argv[1:]))
  print(text)
  if args.launch != 'print':
    print(f'Written: {args.workdir}/table.md, {args.workdir}/table.csv')
  status = report_rows_without_result(
      args.table, args.workdir, scale=args.scale, rows=args.rows,
      extra=args.set, launch=args.launch)
  if status:  # the table is written; the command still fails, naming them
    sys.exit(status)


# Statuses of rows that a run may still give a result, as they are.
_WAITING = ('not run', 'unfinished')


def report_rows_without_result(table: str, workdir: str, *, scale: str,
                               rows: list[str], extra: str,
                               launch: str) -> int:
  """After `rows.reproduce`: a line on stderr per selected row without a
  result (with --launch=print: per row that cannot run), then one naming
  them all by status and what to do. Returns the command's exit status:
  cli.RUN_FAILED where there is such a row, else 0."""
  if launch == 'print':
    without = rows_lib.unrunnable_rows(table, scale, rows, extra)
  else:
    without = tables.rows_without_result(workdir, scale)
  if not without:
    return 0
  by_status = {}
  for row, status, detail in without:
    print(f'Row {row} {status}' + (f': {detail}' if detail else ''),
          file=sys.stderr)
    by_status.setdefault(status, []).append(row)
  named = '; '.join(f'{status}: {", ".join(names)}'
                    for status, names in by_status.items())
  todo = []
  if set(by_status) - set(_WAITING):
    todo.append('fix what each line above says, or leave those rows out '
                'with --rows')
  if launch == 'collect' and set(by_status) & set(_WAITING):
    todo.append('train the rows not run (--launch=local, or the commands of '
                '--launch=print), then collect again')
  if launch == 'local':
    todo.append('rerun the same command: finished rows are not trained '
                'again')
  what = 'cannot run' if launch == 'print' else 'without a result'
  print(f'{len(without)} row(s) {what} ({named}): {"; ".join(todo)}.',
        file=sys.stderr, flush=True)
  return cli.RUN_FAILED


def run() -> None:
  """The `transformer-reproduce` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
