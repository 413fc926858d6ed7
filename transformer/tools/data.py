"""Get the real datasets the experiments read, into the one data folder.

    python -m transformer.tools.data list
    python -m transformer.tools.data fetch multi30k mnist
    python -m transformer.tools.data fetch all [--data_dir=DIR]

`fetch` downloads each dataset (multi30k, shakespeare, ptb, mnist, rte,
cola), checks every file's SHA-256 and puts it where the experiments look
by default: the data folder, `$TRANSFORMER_DATA`, else `../shared/data`
beside the repository where it exists, else `~/.cache/transformer/data`
(`transformer.data.downloads`). Files already there and right are kept.
Without network access it says which file to put where; `--mirror=URL`
reads a copy of a data folder served elsewhere (a lab's server) instead of
the original sources. A download slower than `--min_rate` bytes/s over
`--rate_window` seconds, or longer than `--deadline` seconds, stops with a
line saying so; what it got is kept, and the next fetch continues it.
`list` shows each dataset, its folder and whether it is complete there:
every file checked against its SHA-256 (remembered while the file's size
and time are unchanged), a damaged file named apart from missing ones.
"""

import logging
import os

from absl import flags

from transformer.data import downloads
from transformer.tools import cli

ACTIONS = ('list', 'fetch')


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('data_dir', None, 'The data folder; default '
                      f'${downloads.ENVIRONMENT}, ../shared/data beside the '
                      'repository, or ~/.cache/transformer/data.')
  flags.DEFINE_string('mirror', None, 'Fetch from this URL instead of the '
                      'original sources: a copy of a data folder '
                      '(MIRROR/multi30k/train.de.gz, ...).')
  limits = downloads.Limits()
  flags.DEFINE_float('deadline', limits.deadline, 'Give up a file whose '
                     'download takes longer than this many seconds (all '
                     'its retries together).')
  flags.DEFINE_float('min_rate', limits.min_rate, 'Give up a download '
                     'slower than this many bytes per second over '
                     '--rate_window.')
  flags.DEFINE_float('rate_window', limits.window, 'The seconds over which '
                     '--min_rate is measured; also the longest wait for any '
                     'byte.')


def _limits() -> downloads.Limits:
  """The download limits the flags give, refused when not positive."""
  for name in ('deadline', 'min_rate', 'rate_window'):
    cli.check_flag(name, getattr(flags.FLAGS, name), above=0)
  return downloads.Limits(deadline=flags.FLAGS.deadline,
                          min_rate=flags.FLAGS.min_rate,
                          window=flags.FLAGS.rate_window)


def listing(folder: str) -> str:
  """One line per dataset: name, state in `folder` (complete, or how many
  files are damaged and missing), description; then each damaged file and
  what to do. Checksums are remembered in the folder (`Checksums`)."""
  checksums = downloads.Checksums(folder)
  lines, damaged = [f'Data folder: {folder}'], []
  for name, dataset in downloads.DATASETS.items():
    states = {}
    for file in dataset.files:
      path = os.path.join(folder, dataset.folder, file.name)
      states[path] = downloads.file_state(path, file, checksums)
    damaged += [(path, name) for path, state in states.items()
                if state == 'damaged']
    lines.append(f'  {name:<12} {dataset.folder + "/":<17} '
                 f'{_summary(list(states.values())):<22} {dataset.about}')
  checksums.save()
  lines += [f'Damaged: {path} is not the expected file; move it away and '
            f'run {downloads.FETCH_COMMAND} {name}.' for path, name in damaged]
  return '\n'.join(lines)


def _summary(states: list[str]) -> str:
  """'complete', or e.g. '1 damaged, 2 missing'."""
  if all(state == 'right' for state in states):
    return 'complete'
  return ', '.join(f'{states.count(kind)} {kind}'
                   for kind in ('damaged', 'missing') if kind in states)


def main(argv):
  words = argv[1:]
  if not words or words[0] not in ACTIONS:
    raise ValueError(f'Say what to do: {" or ".join(ACTIONS)}, e.g. '
                     f'{downloads.FETCH_COMMAND} multi30k (datasets: '
                     f'{", ".join(downloads.DATASETS)}, or all).')
  folder = flags.FLAGS.data_dir or downloads.data_dir()
  if words[0] == 'list':
    cli.no_arguments(words)
    print(listing(folder))
    return
  # urllib3 warns of each retry with its chain of exceptions: the
  # command's one line says what failed in the end.
  logging.getLogger('urllib3').setLevel(logging.ERROR)
  written = downloads.fetch(words[1:], folder, mirror=flags.FLAGS.mirror,
                            limits=_limits())
  print(f'{len(written)} file(s) fetched into {folder}.')


def run() -> None:
  """The `transformer-data` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
