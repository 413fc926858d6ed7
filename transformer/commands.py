"""What the command-line entry points share: user errors end the command
with their message (which says what to fix), not a traceback from inside
JAX; `--verbosity=1` logs the traceback too."""

from __future__ import annotations

import functools
import sys
from typing import Callable

from absl import flags
from absl import logging

# Raised by the library for bad input: missing files and workdirs (OSError),
# invalid config or data (ValueError), non-finite training (FloatingPoint).
USER_ERRORS = (OSError, ValueError, FloatingPointError)


def user_errors_exit(main: Callable[[list[str]], None]
                     ) -> Callable[[list[str]], None]:
  """Wraps an absl `main`: USER_ERRORS print 'Error: ...' and exit 1."""

  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except USER_ERRORS as e:
      logging.debug('Stopped by', exc_info=True)
      sys.exit(f'Error: {e}')
  return wrapped


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a misspelt --config.field refused by a
  message (ml_collections raises AttributeError or KeyError there, which
  absl would show as a traceback)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.exit(f'FATAL Flags parsing error: {e}\nPass --helpshort or '
             f'--helpfull to see help on flags.')
  except (AttributeError, KeyError, TypeError) as e:
    detail = str(e).strip('\'"').replace('\\n', ' ').replace("\\'", "'")
    sys.exit(f'Error in a --config override: {detail}')
