"""An error in one line: what refusals and reports quote of an exception
raised by a library (orbax, TensorStore, XLA, tokenizers), whose texts
often run to many lines or a traceback; and the file that was being read
when an error escaped (`reading`), which the commands name."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

# The note `reading` adds to an exception (Python's `add_note`).
_READING = 'While reading '


def first_line(error: BaseException | str, limit: int | None = 300) -> str:
  """The first non-blank line of an error's text, cut to `limit`
  characters (None: whole); the exception's type name where it has no
  text."""
  text = str(error).strip()
  if not text:
    return type(error).__name__ if isinstance(error, BaseException) else ''
  line = text.splitlines()[0].strip()
  return line if limit is None else line[:limit]


@contextlib.contextmanager
def reading(path: str | os.PathLike) -> Iterator[None]:
  """Marks the reading of a user's file: an exception escaping carries
  its name (the innermost file, where readings nest), so that a failure
  deep in a parser (a KeyError in a tokenizer library, say) still names
  the file that caused it (`being_read`; the commands' last line of
  defence, `tools.cli.handle_errors`, shows it)."""
  try:
    yield
  except Exception as e:
    if being_read(e) is None:
      e.add_note(_READING + os.fspath(path))
    raise


def being_read(error: BaseException) -> str | None:
  """The file `reading` saw `error` escape from, if any."""
  for note in getattr(error, '__notes__', ()):
    if note.startswith(_READING):
      return note[len(_READING):]
  return None
