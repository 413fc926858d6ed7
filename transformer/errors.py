"""An error in one line: what refusals and reports quote of an exception
raised by a library (orbax, TensorStore, XLA, tokenizers), whose texts
often run to many lines or a traceback."""

from __future__ import annotations


def first_line(error: BaseException | str, limit: int | None = 300) -> str:
  """The first non-blank line of an error's text, cut to `limit`
  characters (None: whole); the exception's type name where it has no
  text."""
  text = str(error).strip()
  if not text:
    return type(error).__name__ if isinstance(error, BaseException) else ''
  line = text.splitlines()[0].strip()
  return line if limit is None else line[:limit]
