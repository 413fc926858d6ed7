"""Files written whole or not at all, and read whole or refused; the one
path layer for workdirs, local or on cloud storage (`gs://bucket/...`).

Workdir files go through `etils.epath` (TensorFlow's gfile where TensorFlow
is installed, fsspec/gcsfs where it is not; orbax's TensorStore reaches the
bucket itself). Local paths keep plain `os` semantics: atomic renames, file
locks. What only a local file can serve (a SentencePiece model, a log file,
TensorBoard's event writer) lives in a local mirror of the remote folder
(`local_mirror`) and is copied across (`fetch`, `upload`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
import zlib
from typing import Any, Callable, Iterator

from etils import epath

from transformer import errors


def is_remote(path: str | os.PathLike) -> bool:
  """Whether `path` is a URL (gs://, s3://, ...) rather than a local path."""
  return '://' in os.fspath(path)


def absolute(name: str | os.PathLike) -> str:
  """`name` made absolute where it is local (a URL as it is): what a
  record that outlives the current directory keeps."""
  return os.fspath(name) if is_remote(name) else os.path.abspath(name)


def same_place(a: str | os.PathLike, b: str | os.PathLike) -> bool:
  """Whether two paths name one folder (links and '..' resolved where
  they are local)."""
  if is_remote(a) or is_remote(b):
    return os.fspath(a).rstrip('/') == os.fspath(b).rstrip('/')
  return os.path.realpath(a) == os.path.realpath(b)


def check_remote(url: str) -> None:
  """Refuses, in one line, a URL this installation cannot open: a scheme
  epath does not know, or gs:// without gcsfs or TensorFlow."""
  scheme = url.split('://', 1)[0]
  if scheme != 'gs':
    raise ValueError(f'{url}: only gs:// URLs (or local paths) are '
                     f'supported as workdirs.')
  import importlib.util  # pylint: disable=g-import-not-at-top
  if not any(importlib.util.find_spec(m) for m in ('gcsfs', 'tensorflow')):
    raise ValueError(f'{url}: reading gs:// needs gcsfs: pip install gcsfs')


# The libraries through which workdirs reach cloud storage; an error of
# theirs that names a bucket is a storage failure (`storage_failure`).
_STORAGE_LIBRARIES = ('tensorflow', 'gcsfs', 'google.', 'aiohttp')
_URL = re.compile(r'gs://[^\s\'"]+')


def storage_failure(error: BaseException) -> OSError | None:
  """The failure of a storage library to reach gs:// (TensorFlow's gfile,
  gcsfs), said in one line: that no credentials were found and how to
  provide them, when none are; else the library's first line and what to
  check. None for any other error."""
  chain, seen = error, set()
  while chain is not None and id(chain) not in seen:
    seen.add(id(chain))
    text = str(chain).strip()
    if (type(chain).__module__.startswith(_STORAGE_LIBRARIES)
        and ('gs://' in text or 'googleapis.com' in text)):
      break
    chain = chain.__cause__ or chain.__context__
  else:
    return None
  found = _URL.search(text)
  where = found.group(0).rstrip('.,;:)') if found else 'gs://'
  if not _credentials_found():
    return PermissionError(
        f'{where}: no Google Cloud credentials were found, so cloud storage '
        f'cannot be reached; run `gcloud auth application-default login`, '
        f'or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key '
        f'file, then rerun.')
  return OSError(f'{where}: cloud storage failed '
                 f'({errors.first_line(text, None)}); check the bucket name, '
                 f'your access to it and the network.')


def _credentials_found() -> bool:
  """Whether Google's default credentials (the ones TensorFlow and gcsfs
  look for) are there; True where that cannot be told, or for the
  emulator, which needs none."""
  if os.environ.get('STORAGE_EMULATOR_HOST'):
    return True
  try:
    import google.auth  # pylint: disable=g-import-not-at-top
    from google.auth import exceptions  # pylint: disable=g-import-not-at-top
  except ImportError:
    return True
  try:
    google.auth.default()
  except exceptions.DefaultCredentialsError:
    return False
  except Exception:  # pylint: disable=broad-except
    return True
  return True


def path(name: str | os.PathLike) -> epath.Path:
  """An epath for a local path or a URL (local ones made absolute)."""
  name = os.fspath(name)
  return epath.Path(name if is_remote(name) else os.path.abspath(name))


def join(folder: str | os.PathLike, *names: str) -> str:
  """os.path.join for local folders and URLs alike."""
  return os.fspath(path(folder).joinpath(*names)) if is_remote(folder) \
      else os.path.join(folder, *names)


def local_mirror(remote: str) -> str:
  """The local path that stands for `remote` where a library needs a local
  file: ~/.cache/transformer/<scheme>/<bucket>/<path> (a local path is its
  own mirror)."""
  if not is_remote(remote):
    return remote
  scheme, rest = os.fspath(remote).split('://', 1)
  if any(part in ('.', '..') for part in rest.split('/')):
    raise ValueError(f'{remote}: "." and ".." are not allowed in a URL.')
  root = os.environ.get('XDG_CACHE_HOME',
                        os.path.join(os.path.expanduser('~'), '.cache'))
  return os.path.join(root, 'transformer', scheme,
                      *[part for part in rest.split('/') if part])


def fetch(remote_file: str) -> str:
  """A local copy of `remote_file` (for libraries that only open local
  files, e.g. SentencePiece); a local path is returned as it is."""
  if not is_remote(remote_file):
    return remote_file
  local = local_mirror(remote_file)
  write_atomically(local, path(remote_file).read_bytes())
  return local


def fetch_folder(remote_folder: str) -> str:
  """A local copy of every file under `remote_folder` (its local mirror);
  a local folder is returned as it is."""
  if not is_remote(remote_folder):
    return remote_folder
  for _, remote_file in walk_files(remote_folder):
    fetch(os.fspath(remote_file))
  return local_mirror(remote_folder)


def walk_files(folder: str) -> Iterator[tuple[str, epath.Path]]:
  """(path relative to `folder` with '/', path) of every file under it,
  sorted; the same for local folders and URLs."""
  def under(directory: epath.Path, prefix: str):
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
      relative = f'{prefix}{child.name}'
      if child.is_dir():
        yield from under(child, relative + '/')
      else:
        yield relative, child
  yield from under(path(folder), '')


def upload(local_folder: str, remote_folder: str, prefix: str = '') -> None:
  """Copies every file under `local_folder` (whose name starts with
  `prefix`) to the same place under `remote_folder`, replacing each whole."""
  for root, _, names in os.walk(local_folder):
    for name in names:
      if not name.startswith(prefix):
        continue
      source = os.path.join(root, name)
      relative = os.path.relpath(source, local_folder)
      with open(source, 'rb') as f:
        write_atomically(join(remote_folder, *relative.split(os.sep)),
                         f.read())


def write_atomically(path: str, data: bytes | str) -> None:
  """Writes `data` (text as UTF-8) via a temporary file in the same folder
  and a rename, creating the folder.

  A crash mid-write leaves at most a stray temporary file, never a partial
  `path` that a later run would take for a finished file (a vocabulary, a
  workdir's config.json or progress.json). On cloud storage an object is
  written whole or not at all by itself.
  """
  if isinstance(data, str):
    data = data.encode('utf-8')
  try:
    if is_remote(path):
      target = epath.Path(path)
      target.parent.mkdir(parents=True, exist_ok=True)
      target.write_bytes(data)
    else:
      _write_locally(path, data)
  except OSError as e:
    # A full disk fails the write of an open file, naming no file: name it,
    # so that whoever reports the error can say which.
    if e.errno is not None and e.filename is None:
      e.filename = path
    raise


def _write_locally(path: str, data: bytes) -> None:
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


def read_bytes(name: str) -> bytes:
  """The contents of a file, decompressed if its name ends in .gz; a gzip
  file cut short (an interrupted download) or garbled is refused naming
  the file."""
  if not name.endswith('.gz'):
    return path(name).read_bytes()
  try:
    with path(name).open('rb') as raw, gzip.open(raw, 'rb') as f:
      return f.read()
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise ValueError(f'{name} is not a complete gzip file ({e}): the '
                     f'download was probably cut short; fetch it '
                     f'again.') from e


def read_text(name: str) -> str:
  """A UTF-8 text file, local or remote."""
  return path(name).read_text(encoding='utf-8')


def exists(name: str) -> bool:
  return path(name).exists()


def listdir(name: str) -> list[str]:
  """The names in a folder (empty if it does not exist)."""
  folder = path(name)
  return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def makedirs(name: str) -> None:
  path(name).mkdir(parents=True, exist_ok=True)


class DamagedFile(ValueError):
  """A small file (a workdir's config.json, progress.json, ...) whose
  content does not fit its schema; the message names the file and the
  field."""


class NotUtf8(ValueError):
  """Bytes that are not UTF-8: where the first bad byte is."""

  def __init__(self, byte: int, offset: int, line: int):
    super().__init__(f'byte {byte:#04x} at line {line} (offset {offset})')
    self.byte, self.offset, self.line = byte, offset, line


def decode_utf8(raw: bytes) -> str:
  """UTF-8 text without a byte-order mark before it (an editor's), which is
  no part of it; `NotUtf8` names the first byte that is not."""
  try:
    # Not 'utf-8-sig', whose offsets would not count the mark.
    return raw.decode('utf-8').removeprefix('\ufeff')
  except UnicodeDecodeError as e:
    raise NotUtf8(raw[e.start], e.start,
                  raw.count(b'\n', 0, e.start) + 1) from None


def read_record(name: str, problem_of: Callable[[Any], str], *,
                is_json: bool = True, raw: bytes | None = None) -> Any:
  """The content of a small file, its JSON value (or, not `is_json`, its
  text stripped), read from `name` unless `raw` is given, refused unless
  `problem_of(value)` finds no problem (''). UTF-8, with or without a
  byte-order mark before it.

  Raises:
    DamagedFile: '{name} is damaged: <the problem, naming the field>'.
  """
  if raw is None:
    raw = path(name).read_bytes()
  try:
    value = decode_utf8(raw)
  except NotUtf8 as e:
    raise DamagedFile(f'{name} is damaged: not UTF-8 text (byte {e.offset} '
                      f'is {e.byte:#04x}, line {e.line})') from e
  if is_json:
    try:
      value = json.loads(value)
    except json.JSONDecodeError as e:  # its text names the line and column
      raise DamagedFile(f'{name} is damaged: not valid JSON ({e})') from e
    except RecursionError as e:
      raise DamagedFile(f'{name} is damaged: not valid JSON (nested too '
                        f'deeply to read)') from e
  else:
    value = value.strip()
  problem = problem_of(value)
  if problem:
    raise DamagedFile(f'{name} is damaged: {problem}')
  return value


def shown(value: Any) -> str:
  """A value as a JSON file has it, cut short (for messages)."""
  text = json.dumps(value)
  return text if len(text) <= 60 else text[:57] + '...'
