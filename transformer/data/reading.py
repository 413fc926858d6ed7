"""The one reading layer for user files: each is read whole and returned,
or refused in one line that names the file being parsed, its line where it
has one, and the fix.

The readers: `text` and `lines` (a TSV, vocab.txt, merges.txt),
`json_value` and `json_object` (configs, tokenizer files, built on
`storage.read_record`), `safetensors`, and `read_bytes`. Text is UTF-8, and
a byte-order mark before it (Notepad's and Excel's 'UTF-8') is no part of
it. A file that is not what it should be (another encoding, garbled, cut
short, not JSON) raises `Unreadable`, a `storage.DamagedFile` and so a
ValueError, which the commands print as one line; a file that is not there
raises FileNotFoundError. Paths are `storage`'s: local, gzipped (.gz) or on
cloud storage; safetensors are read locally."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from transformer import errors
from transformer import storage

# How to convert a file of another encoding, where that one is not known.
_ICONV = 'iconv -f latin1 -t utf-8 FILE > FILE.utf8'
_UTF16_BOMS = (b'\xff\xfe', b'\xfe\xff')
REDOWNLOAD = 'the file is damaged or cut short; download it again'


class Unreadable(storage.DamagedFile):
  """A user's file that is not what it should be: another encoding than
  UTF-8, not JSON, cut short or garbled. The message is one line naming the
  file (and the line where it can) and the fix."""


def read_bytes(path: str) -> bytes:
  """The bytes of a file, decompressed if its name ends in .gz (a gzip file
  cut short is refused naming it)."""
  try:
    return storage.read_bytes(path)
  except ValueError as e:  # a gzip file cut short
    raise Unreadable(str(e)) from e


def decode_text(raw: bytes, name: str) -> str:
  """`raw` as UTF-8 text, without a byte-order mark before it; invalid
  UTF-8 is refused naming the line and the byte (`name` says where the
  bytes came from: a file, or standard input)."""
  if raw.startswith(_UTF16_BOMS):
    raise Unreadable(f'{name} is UTF-16 text (its first bytes are a UTF-16 '
                     f'byte-order mark), not valid UTF-8; convert it, e.g. '
                     f'iconv -f utf-16 -t utf-8 FILE > FILE.utf8')
  try:
    return storage.decode_utf8(raw)
  except storage.NotUtf8 as e:
    raise Unreadable(f'{name} is not valid UTF-8: {e}; convert it, e.g. '
                     f'{_ICONV}') from None


def text(path: str) -> str:
  """The text of a UTF-8 file (gzipped if it ends in .gz), as on disk
  ('\\r\\n' kept) but for a byte-order mark before it."""
  return decode_text(read_bytes(path), path)


def split_lines(content: str) -> list[str]:
  """Lines split on '\\n' only, as `wc -l` counts them (a stray '\\r' inside
  a sentence must not shift the lines); a final newline ends the last."""
  lines = content.split('\n')
  if lines and not lines[-1]:
    lines.pop()
  return lines


def lines(path: str) -> list[str]:
  """The lines of a UTF-8 file (`split_lines`): a TSV's, a vocab.txt's."""
  return split_lines(text(path))


def json_value(path: str, problem_of: Callable[[Any], str] = lambda _: '', *,
               raw: bytes | None = None, fix: str = 'download it again'
               ) -> Any:
  """A JSON file's value (read from `path` unless `raw` is given), refused
  unless `problem_of(value)` finds no problem ('').

  Raises:
    FileNotFoundError: no such file.
    Unreadable: '{path} is damaged: <the problem: the byte or the line and
      column where JSON stops, or `problem_of`'s>; {fix}'.
  """
  if raw is None:
    raw = read_bytes(path)
  try:
    return storage.read_record(path, problem_of, raw=raw)
  except storage.DamagedFile as e:
    raise Unreadable(f'{e}; {fix}.') from e


def json_object(path: str, *, raw: bytes | None = None,
                fix: str = 'download it again') -> dict:
  """A JSON file that holds an object (`json_value`)."""
  return json_value(path, _object_problem, raw=raw, fix=fix)


def _object_problem(value: Any) -> str:
  if isinstance(value, dict):
    return ''
  return f'it holds a {type(value).__name__}, not a JSON object'


def safetensors(path: str) -> dict[str, np.ndarray]:
  """The tensors of a safetensors file; one that is malformed (a header
  length beyond the file, offsets outside the data, an unknown dtype, cut
  short) is refused in one line naming it."""
  import safetensors as safetensors_lib  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} not found: the checkpoint is '
                            f'incomplete; download it again.')
  try:
    with errors.reading(path):  # what the library may raise besides
      return load_file(path)
  except safetensors_lib.SafetensorError as e:
    raise Unreadable(f'{path} is not a valid safetensors file '
                     f'({errors.first_line(e, None)}): {REDOWNLOAD}.') from e
