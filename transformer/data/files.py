"""Files written whole or not at all, and read whole or refused."""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib


def write_atomically(path: str, data: bytes | str) -> None:
  """Writes `data` (text as UTF-8) via a temporary file in the same folder
  and a rename, creating the folder.

  A crash mid-write leaves at most a stray temporary file, never a partial
  `path` that a later run would take for a finished file (a vocabulary, a
  workdir's config.json or progress.json).
  """
  if isinstance(data, str):
    data = data.encode('utf-8')
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{os.path.basename(path)}.',
                             suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def read_bytes(path: str) -> bytes:
  """The contents of a file, decompressed if its name ends in .gz; a gzip
  file cut short (an interrupted download) or garbled is refused naming
  the file."""
  if not path.endswith('.gz'):
    with open(path, 'rb') as f:
      return f.read()
  try:
    with gzip.open(path, 'rb') as f:
      return f.read()
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise ValueError(f'{path} is not a complete gzip file ({e}): the '
                     f'download was probably cut short; fetch it '
                     f'again.') from e
