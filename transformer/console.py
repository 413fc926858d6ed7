"""A progress line a user can watch: redrawn in place on a terminal, one
line per interval where the output is a pipe or a file (a cluster's log),
so a log keeps the whole history and a terminal shows the latest.

No stream is replaced. While a line is drawn in place, what the run itself
prints goes through `ProgressLine.print`, which ends the line first; a log
record that reaches the console (a library's warning) ends it through a
filter on the console's log handlers, and a Python warning through
`warnings.showwarning`, the hook Python gives for them. So no message
lands in the middle of the progress line, short of a library writing to
the terminal itself.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO
import warnings

_CLEAR_LINE = '\r\x1b[K'  # carriage return, erase to the end of the line


class _EndsLine(logging.Filter):
  """Ends the progress line before a console handler writes a record."""

  def __init__(self, line: ProgressLine):
    super().__init__()
    self._line = line

  def filter(self, record: logging.LogRecord) -> bool:
    self._line.end()
    return True


class ProgressLine:
  """Shows progress lines on stdout (see the module docstring)."""

  def __init__(self, stream: TextIO | None = None):
    self._stream = stream if stream is not None else sys.stdout
    self._drawn = False  # a line in place, not yet ended
    self._hooks = None  # (console handlers, their filter, showwarning)

  @property
  def in_place(self) -> bool:
    isatty = getattr(self._stream, 'isatty', None)
    return bool(isatty and isatty())

  def show(self, text: str) -> None:
    if not self.in_place:
      print(text, file=self._stream, flush=True)
      return
    self._hook()
    self._stream.write(_CLEAR_LINE + text)
    self._stream.flush()
    self._drawn = True

  def print(self, *values: Any, **kwargs: Any) -> None:
    """`print`, below the line."""
    self.end()
    print(*values, flush=True, **kwargs)

  def end(self) -> None:
    """Ends a line drawn in place (the next output starts below it)."""
    if self._drawn:
      self._drawn = False
      self._stream.write('\n')
      self._stream.flush()

  def close(self) -> None:
    """Ends the line and takes its hooks off."""
    self.end()
    if self._hooks is None:
      return
    handlers, ends_line, showwarning = self._hooks
    for handler in handlers:
      handler.removeFilter(ends_line)
    warnings.showwarning = showwarning
    self._hooks = None

  def _hook(self) -> None:
    if self._hooks is not None:
      return
    handlers, ends_line = _console_handlers(), _EndsLine(self)
    for handler in handlers:
      handler.addFilter(ends_line)
    showwarning = warnings.showwarning

    def show_below(*args, **kwargs):
      self.end()
      showwarning(*args, **kwargs)

    warnings.showwarning = show_below
    self._hooks = (handlers, ends_line, showwarning)

  def __enter__(self) -> ProgressLine:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _console_handlers() -> list[logging.Handler]:
  """The root logger's handlers that write to a stream other than a file,
  absl's among them."""
  found = []
  for handler in logging.getLogger().handlers:
    inner = getattr(handler, 'python_handler', handler)  # absl's wrapper
    if (isinstance(inner, logging.StreamHandler)
        and not isinstance(inner, logging.FileHandler)):
      found.append(handler)
  return found
