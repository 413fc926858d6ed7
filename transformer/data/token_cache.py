"""Tokenised training examples cached on local disk and memory-mapped.

Tokenising a corpus again at every start costs minutes for WMT-sized data
(4.5M pairs) and keeps the corpus in host memory; the cache is written once
and later starts map it: no raw text is read, no tokenizer runs, and the
token arrays stay on disk, paged in as batches touch them.

A cache is a folder `<root>/<name>-<digest>`, `digest` a hash of its key
(everything that decides the tokens: the tokenizer's files, the data
settings, the corpus files' sizes and modification times), holding

  meta.json                          the key, counts, notes, checksums
  source.tokens  target.tokens       each side's ids, concatenated (raw)
  source.lengths target.lengths      int32 lengths of the examples (raw)

It is written to a temporary folder and renamed into place, so a cache is
whole or absent. A folder whose files do not match their recorded sizes and
checksums, or whose meta.json cannot be read, is rebuilt with a message,
never used. A changed key gives a new digest: a changed corpus is noticed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Iterable

import numpy as np

from transformer.data import batching

FORMAT = 2  # bump when the layout changes: old caches are then rebuilt
SIDES = ('source', 'target')
_CHUNK = 1 << 23  # bytes hashed per read


def digest(key: dict[str, Any]) -> str:
  """A short stable hash of a JSON-able key."""
  text = json.dumps({'format': FORMAT, **key}, sort_keys=True)
  return hashlib.blake2b(text.encode(), digest_size=10).hexdigest()


def file_stamp(path: str) -> dict[str, int]:
  """What identifies a corpus file's version without reading it."""
  stat = os.stat(path)
  return {'size': stat.st_size, 'mtime_ns': stat.st_mtime_ns}


def _checksum(path: str) -> str:
  hasher = hashlib.blake2b(digest_size=16)
  with open(path, 'rb') as f:
    while chunk := f.read(_CHUNK):
      hasher.update(chunk)
  return hasher.hexdigest()


def _token_dtype(vocab_size: int) -> np.dtype:
  """The narrowest dtype for ids below vocab_size (halves a 32k vocab's
  cache)."""
  return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def _write(folder: str, chunks: Iterable[list[batching.Example]],
           vocab_size: int, key: dict[str, Any]) -> dict[str, Any]:
  """Streams the chunks into the side files; returns meta.json's content."""
  dtype = _token_dtype(vocab_size)
  files = {(side, part): open(os.path.join(folder, f'{side}.{part}'), 'wb')
           for side in SIDES for part in ('tokens', 'lengths')}
  examples = 0
  try:
    for chunk in chunks:
      for index, side in enumerate(SIDES):
        ids = [np.asarray(example[index]) for example in chunk]
        lengths = np.fromiter(map(len, ids), np.int32, len(ids))
        if len(lengths) and lengths.min() < 1:
          raise ValueError(f'Example {examples + int(np.argmin(lengths))} '
                           f'has an empty {side}; each side must end with '
                           f'EOS.')
        files[side, 'lengths'].write(lengths.tobytes())
        if ids:
          tokens = np.concatenate(ids)
          if tokens.min() < 1 or tokens.max() >= vocab_size:
            raise ValueError(
                f'Token ids outside [1, {vocab_size}) in the {side} side: '
                f'0 is padding, and the tokenizer and vocab_size='
                f'{vocab_size} must agree.')
          files[side, 'tokens'].write(tokens.astype(dtype).tobytes())
      examples += len(chunk)
  finally:
    for f in files.values():
      f.close()
  return {'key': key, 'format': FORMAT, 'examples': examples,
          'dtype': dtype.name,
          'checksums': {name: _checksum(os.path.join(folder, name))
                        for name in sorted(os.listdir(folder))}}


# The longest name of a cache's files.
_LONGEST_FILE = max(['meta.json'] + [f'{side}.{part}' for side in SIDES
                                     for part in ('tokens', 'lengths')],
                    key=len)


def _check_path_length(folder: str) -> None:
  """Refuses a cache folder whose files' paths are longer than the system
  takes (a workdir of a very long path: its own folder may still fit,
  while the cache's files do not, and would be taken for missing)."""
  root = os.path.dirname(folder)
  existing = root
  while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
    existing = os.path.dirname(existing)
  try:
    longest, name_max = (os.pathconf(existing, 'PC_PATH_MAX'),
                         os.pathconf(existing, 'PC_NAME_MAX'))
  except (OSError, ValueError):
    longest, name_max = 4096, 255
  path = os.path.join(folder, _LONGEST_FILE)
  size = len(os.fsencode(path)) + 1  # with the terminating NUL
  if size > longest or len(os.fsencode(os.path.basename(folder))) > name_max:
    raise ValueError(
        f'The token cache {folder} cannot be written: the paths of its '
        f'files ({path}) are {size} bytes long, over the {longest} this '
        f'system takes. Give a workdir of a shorter path (the cache is '
        f'kept in WORKDIR/cache).')


def _open(folder: str) -> tuple[tuple[batching.Side, ...], dict[str, Any]]:
  """The sides of a cache folder, memory-mapped, after checking it is
  whole; raises ValueError naming what is wrong."""
  try:
    with open(os.path.join(folder, 'meta.json')) as f:
      meta = json.load(f)
    checksums, dtype = meta['checksums'], np.dtype(meta['dtype'])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'meta.json is unreadable ({e})') from e
  for name, expected in checksums.items():
    path = os.path.join(folder, name)
    try:
      os.stat(path)
    except FileNotFoundError:
      raise ValueError(f'{name} is missing') from None
    # Any other failure (a path too long, no permission) is not damage: it
    # is raised as it is, naming the path, rather than rebuilt in vain.
    if not os.path.isfile(path) or _checksum(path) != expected:
      raise ValueError(f'{name} is missing or does not match its checksum')
  sides = []
  for side in SIDES:
    lengths = np.fromfile(os.path.join(folder, f'{side}.lengths'), np.int32)
    tokens_path = os.path.join(folder, f'{side}.tokens')
    count = os.path.getsize(tokens_path) // dtype.itemsize
    if len(lengths) != meta['examples'] or lengths.sum(dtype=np.int64) != count:
      raise ValueError(f'the {side} lengths do not add up to its tokens')
    tokens = (np.memmap(tokens_path, dtype, mode='r', shape=(count,))
              if count else np.zeros(0, dtype))
    sides.append(batching.Side.from_arrays(tokens, lengths))
  return tuple(sides), meta


def load_or_build(root: str, name: str, key: dict[str, Any],
                  chunks: Callable[[], Iterable[list[batching.Example]]], *,
                  vocab_size: int, notes: Callable[[], dict[str, Any]]
                  = dict) -> tuple[batching.Side, batching.Side,
                                   dict[str, Any]]:
  """The (source, target) sides of the examples `chunks()` yields, from
  the cache of `key` under `root`, built first if absent or damaged.

  Args:
    root: a local folder for caches (created if needed).
    name: the cache's readable name, e.g. 'translation-train'.
    key: JSON-able; everything the tokens depend on.
    chunks: yields lists of examples (source ids, target ids), in order;
      called only to build.
    vocab_size: ids are below it (decides the stored dtype).
    notes: called after `chunks()` is exhausted: what the build wants
      remembered (e.g. counts of dropped examples), kept in meta.json and
      returned again by every later load.

  Returns:
    (source, target, meta), meta['notes'] the notes of the build.
  """
  folder = os.path.join(root, f'{name}-{digest(key)}')
  _check_path_length(folder)
  if os.path.isdir(folder):
    try:
      (source, target), meta = _open(folder)
      print(f'Token cache: {folder} ({meta["examples"]:,} examples).',
            flush=True)
      return source, target, meta
    except ValueError as e:
      print(f'Token cache {folder} is damaged ({e}); rebuilding it.',
            flush=True)
      shutil.rmtree(folder)
  os.makedirs(root, exist_ok=True)
  start = time.perf_counter()
  staging = tempfile.mkdtemp(prefix=f'.{name}-', dir=root)
  try:
    meta = _write(staging, chunks(), vocab_size, key)
    meta['notes'] = notes()
    with open(os.path.join(staging, 'meta.json'), 'w') as f:
      json.dump(meta, f, indent=1)
    try:
      os.replace(staging, folder)
    except OSError:
      if not os.path.isdir(folder):
        raise
      # Another process of this host built it meanwhile: use theirs.
      shutil.rmtree(staging)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  print(f'Token cache: built {folder} ({meta["examples"]:,} examples) in '
        f'{time.perf_counter() - start:.1f} s.', flush=True)
  try:
    (source, target), meta = _open(folder)
  except ValueError as e:  # just written: not damage
    raise ValueError(f'The token cache {folder} just built cannot be read '
                     f'back: {e}.') from e
  return source, target, meta


def path_stamps(path: str) -> dict[str, dict[str, int]]:
  """`file_stamp` of a file, or of every file under a folder (by relative
  path): a key part that changes when the corpus does."""
  if os.path.isfile(path):
    return {os.path.basename(path): file_stamp(path)}
  return {os.path.relpath(os.path.join(folder, name), path):
          file_stamp(os.path.join(folder, name))
          for folder, _, names in sorted(os.walk(path)) for name in names}
