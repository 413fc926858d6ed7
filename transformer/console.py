"""A progress line a user can watch: redrawn in place on a terminal, one
line per interval where the output is a pipe or a file (a cluster's log),
so a log keeps the whole history and a terminal shows the latest.

While a line is drawn in place, anything else written to stdout or stderr
(an evaluation's lines, a warning) first ends it, so no message lands in
the middle of the progress line.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

_CLEAR_LINE = '\r\x1b[K'  # carriage return, erase to the end of the line


class _EndsProgressFirst:
  """A stream (stdout or stderr) whose writes first end an open progress
  line; everything else is the stream's own."""

  def __init__(self, stream: TextIO, line: 'ProgressLine'):
    self._stream, self._line = stream, line

  def write(self, text: str) -> int:
    if text:
      self._line.end()
    return self._stream.write(text)

  def __getattr__(self, name):
    return getattr(self._stream, name)


class ProgressLine:
  """Shows progress lines on stdout (see the module docstring)."""

  def __init__(self, stream: TextIO | None = None):
    self._stream = stream if stream is not None else sys.stdout
    self._drawn = False  # a line in place, not yet ended
    self._wrapped = None  # (stdout, stderr, log handlers' streams) replaced

  @property
  def in_place(self) -> bool:
    isatty = getattr(self._stream, 'isatty', None)
    return bool(isatty and isatty())

  def show(self, text: str) -> None:
    if not self.in_place:
      print(text, file=self._stream, flush=True)
      return
    self._wrap()
    self._stream.write(_CLEAR_LINE + text)
    self._stream.flush()
    self._drawn = True

  def end(self) -> None:
    """Ends a line drawn in place (the next output starts below it)."""
    if self._drawn:
      self._drawn = False
      self._stream.write('\n')
      self._stream.flush()

  def close(self) -> None:
    """Ends the line and gives the streams back."""
    self.end()
    if self._wrapped is None:
      return
    stdout, stderr, handlers = self._wrapped
    sys.stdout, sys.stderr = stdout, stderr
    for handler, stream in handlers:
      handler.setStream(stream)
    self._wrapped = None

  def _wrap(self) -> None:
    """Routes stdout, stderr and the log handlers writing to them through
    `_EndsProgressFirst` until `close`."""
    if self._wrapped is not None:
      return
    stdout, stderr = sys.stdout, sys.stderr
    handlers = [(h, h.stream) for h in _stream_handlers()
                if h.stream in (stdout, stderr, sys.__stderr__)]
    self._wrapped = (stdout, stderr, handlers)
    sys.stdout = _EndsProgressFirst(stdout, self)
    sys.stderr = _EndsProgressFirst(stderr, self)
    for handler, stream in handlers:
      handler.setStream(_EndsProgressFirst(stream, self))

  def __enter__(self) -> 'ProgressLine':
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _stream_handlers() -> list[logging.StreamHandler]:
  """The console handlers of the root logger, absl's among them."""
  found = []
  for handler in logging.getLogger().handlers:
    inner = getattr(handler, 'python_handler', handler)  # absl's wrapper
    if (isinstance(inner, logging.StreamHandler)
        and not isinstance(inner, logging.FileHandler)):
      found.append(inner)
  return found
