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
the original sources. `list` shows each dataset, its folder and whether it
is complete there.
"""

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


def listing(folder: str) -> str:
  """One line per dataset: name, completeness in `folder`, description."""
  lines = [f'Data folder: {folder}']
  for name, dataset in downloads.DATASETS.items():
    there = sum(os.path.exists(os.path.join(folder, dataset.folder, f.name))
                for f in dataset.files)
    state = ('complete' if there == len(dataset.files)
             else f'{there} of {len(dataset.files)} files')
    lines.append(f'  {name:<12} {dataset.folder + "/":<17} {state:<16} '
                 f'{dataset.about}')
  return '\n'.join(lines)


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
  written = downloads.fetch(words[1:], folder, mirror=flags.FLAGS.mirror)
  print(f'{len(written)} file(s) fetched into {folder}.')


def run() -> None:
  """The `transformer-data` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
