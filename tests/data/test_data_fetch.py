"""Fetching the real datasets: every file checked by its SHA-256 before it
is put in place, files already right kept, wrong ones refused, archives'
members extracted, a re-compressed .gz accepted, offline a list of what to
put where, and a missing dataset's error naming the command (the commands:
e2e/test_data_fetch_e2e.py); `list` telling complete, damaged and missing
datasets apart, its checksums remembered. A local HTTP server (the `server`
fixture of conftest.py) stands in for the sources: nothing reaches the
network. (Stalls, retries and resuming: test_data_transfer.py.)"""

import gzip
import hashlib
import os
import re
import socket
import zipfile

import pytest

from conftest import raises_naming
from conftest import SHARED_DATA as SHARED
from transformer.data import downloads
from transformer.tools import data as data_tool

TEXT = b'one line\nanother line\n'
TSV = b'index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n'


def sha(data):
  return hashlib.sha256(data).hexdigest()


def datasets(base):
  """Two small datasets at `base`: a text and a .gz file, and a .zip whose
  member is the file."""
  return {
      'corpus': downloads.Dataset('corpus', 'a corpus', (
          downloads.File('input.txt', f'{base}/corpus.txt', sha(TEXT)),
          downloads.File('words.gz', f'{base}/words.gz', sha(TEXT)))),
      'task': downloads.Dataset('glue/Task', 'a task', (
          downloads.File('train.tsv', f'{base}/Task.zip', sha(TSV),
                         member='Task/train.tsv'),)),
  }


@pytest.fixture()
def table(server, monkeypatch):
  """`datasets` served locally."""
  base, folder = server
  (folder / 'corpus.txt').write_bytes(TEXT)
  (folder / 'words.gz').write_bytes(gzip.compress(TEXT, mtime=0))
  with zipfile.ZipFile(folder / 'Task.zip', 'w') as archive:
    archive.writestr('Task/train.tsv', TSV)
    archive.writestr('Task/test.tsv', b'not wanted')
  monkeypatch.setattr(downloads, 'DATASETS', datasets(base))
  return folder


def test_fetch_checks_and_places_every_file(table, tmp_path):
  said = []
  written = downloads.fetch(['all'], str(tmp_path / 'data'), say=said.append)
  data = tmp_path / 'data'
  assert sorted(written) == sorted(str(data / p) for p in (
      'corpus/input.txt', 'corpus/words.gz', 'glue/Task/train.tsv'))
  assert (data / 'corpus' / 'input.txt').read_bytes() == TEXT
  assert gzip.decompress((data / 'corpus' / 'words.gz').read_bytes()) == TEXT
  assert (data / 'glue' / 'Task' / 'train.tsv').read_bytes() == TSV
  assert not (data / 'glue' / 'Task' / 'test.tsv').exists()
  # No temporary file left, nor the archive.
  assert not [p for p in data.rglob('.fetching-*')]
  assert not [p for p in data.rglob('*.part')]
  # Again: everything is there and right, nothing is fetched.
  assert downloads.fetch(['corpus'], str(data), say=said.append) == []
  assert f'Already there: {data}/corpus/input.txt' in said


def test_a_recompressed_gz_of_the_same_data_is_accepted(table, tmp_path):
  (table / 'words.gz').write_bytes(gzip.compress(TEXT, compresslevel=1,
                                                 mtime=123))
  downloads.fetch(['corpus'], str(tmp_path))
  assert gzip.decompress((tmp_path / 'corpus' / 'words.gz').read_bytes()) \
      == TEXT


def test_a_source_giving_other_bytes_writes_nothing(table, tmp_path):
  (table / 'corpus.txt').write_bytes(b'<html>moved</html>')
  with raises_naming(ValueError, '/corpus.txt', 'input.txt',
                     'nothing was written', 'by hand'):
    downloads.fetch(['corpus'], str(tmp_path))
  assert not (tmp_path / 'corpus' / 'input.txt').exists()


def test_a_wrong_file_already_there_is_refused_not_replaced(table, tmp_path):
  (tmp_path / 'corpus').mkdir()
  (tmp_path / 'corpus' / 'input.txt').write_bytes(b'my own notes')
  with raises_naming(ValueError, str(tmp_path / 'corpus' / 'input.txt'),
                     'move it away'):
    downloads.fetch(['corpus'], str(tmp_path))
  assert (tmp_path / 'corpus' / 'input.txt').read_bytes() == b'my own notes'


def closed_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def test_offline_lists_each_file_and_where_it_goes(tmp_path, monkeypatch):
  base = f'http://127.0.0.1:{closed_port()}'
  monkeypatch.setattr(downloads, 'DATASETS', datasets(base))
  with pytest.raises(OSError) as error:
    downloads.fetch(['all'], str(tmp_path),
                    limits=downloads.Limits(retries=1, backoff=0))
  message = str(error.value)
  assert f'3 file(s) ({base}/corpus.txt: ' in message
  assert 'Connection refused' in message and '--mirror' in message
  assert f'{tmp_path}/corpus/input.txt  <-  {base}/corpus.txt' in message
  assert (f'{tmp_path}/glue/Task/train.tsv  <-  Task/train.tsv from '
          f'{base}/Task.zip') in message
  assert 'Traceback' not in message and 'HTTPConnection' not in message


def test_unknown_names_are_refused_with_the_choices(table):
  with raises_naming(ValueError, 'nope', 'corpus, task or all'):
    downloads.fetch(['nope'])


def test_the_data_folder_follows_the_environment(monkeypatch, tmp_path):
  monkeypatch.setenv('TRANSFORMER_DATA', str(tmp_path))
  assert downloads.data_dir() == str(tmp_path)
  assert downloads.local('mnist') == str(tmp_path / 'mnist')
  hint = downloads.fetch_hint(f'No file {tmp_path}/ptb/ptb.train.txt')
  assert 'python -m transformer.tools.data fetch ptb' in hint
  assert downloads.fetch_hint('No file /elsewhere/ptb.train.txt') == ''


@pytest.mark.skipif(not os.path.isdir(SHARED), reason='no ../shared/data')
def test_the_table_holds_the_checksums_of_the_real_files():
  for dataset in downloads.DATASETS.values():
    for file in dataset.files:
      path = os.path.join(SHARED, dataset.folder, file.name)
      with open(path, 'rb') as f:
        assert downloads.content_sha256(f.read(), file.name) == file.sha256, \
            path
      assert downloads.file_sha256(path, file.name) == file.sha256, path


def states(listed):
  """`list`'s state of each dataset: its columns are apart by 2 spaces or
  more."""
  rows = [re.split(r'\s{2,}', line.strip())
          for line in listed.splitlines()[1:] if line.startswith('  ')]
  return {name: state for name, _, state, _ in rows}


def test_list_tells_complete_damaged_and_missing(table, tmp_path):
  data = tmp_path / 'data'
  downloads.fetch(['corpus'], str(data))
  assert states(data_tool.listing(str(data))) == {
      'corpus': 'complete', 'task': '1 missing'}
  words = data / 'corpus' / 'words.gz'
  words.write_bytes(gzip.compress(b'other text\n'))
  listed = data_tool.listing(str(data))
  assert states(listed) == {'corpus': '1 damaged', 'task': '1 missing'}
  assert (f'Damaged: {words} is not the expected file; move it away and '
          f'run python -m transformer.tools.data fetch corpus.') in listed
  (data / 'corpus' / 'input.txt').unlink()
  assert states(data_tool.listing(str(data)))['corpus'] == \
      '1 damaged, 1 missing'


def test_list_reads_a_file_again_only_when_it_changed(table, tmp_path,
                                                      monkeypatch):
  data = tmp_path / 'data'
  (data / 'corpus').mkdir(parents=True)
  corpus = data / 'corpus' / 'input.txt'
  corpus.write_bytes(TEXT)  # put there by hand: no checksum known yet
  (data / 'corpus' / 'words.gz').write_bytes(gzip.compress(TEXT))
  read = []
  hashed = downloads.file_sha256
  monkeypatch.setattr(downloads, 'file_sha256',
                      lambda path, name: read.append(path) or hashed(path,
                                                                     name))
  assert states(data_tool.listing(str(data)))['corpus'] == 'complete'
  assert len(read) == 2
  assert states(data_tool.listing(str(data)))['corpus'] == 'complete'
  assert len(read) == 2  # unchanged files: their checksums remembered
  stamp = corpus.stat()
  corpus.write_bytes(TEXT.upper())  # damaged, same size, then a new time
  os.utime(corpus, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
  assert states(data_tool.listing(str(data)))['corpus'] == '1 damaged'
  assert read[2:] == [str(corpus)]
  (data / downloads.CHECKSUMS).write_text('{not json')
  assert states(data_tool.listing(str(data)))['corpus'] == '1 damaged'
  assert len(read) == 5  # a lost record: every file read again


def test_fetch_remembers_the_checksums_it_checked(table, tmp_path,
                                                  monkeypatch):
  data = tmp_path / 'data'
  downloads.fetch(['all'], str(data))
  monkeypatch.setattr(downloads, 'file_sha256', None)  # not called
  assert set(states(data_tool.listing(str(data))).values()) == {'complete'}
  assert downloads.fetch(['all'], str(data)) == []


def test_a_mirror_on_a_shared_file_system_is_read(tmp_path, monkeypatch):
  """--mirror=file://FOLDER (a lab's copy on NFS), as urlopen read it."""
  monkeypatch.setattr(downloads, 'DATASETS', datasets('https://nowhere'))
  mirror = tmp_path / 'mirror'
  (mirror / 'corpus').mkdir(parents=True)
  (mirror / 'corpus' / 'input.txt').write_bytes(TEXT)
  (mirror / 'corpus' / 'words.gz').write_bytes(gzip.compress(TEXT))
  written = downloads.fetch(['corpus'], str(tmp_path / 'data'),
                            mirror=f'file://{mirror}', say=lambda _: None)
  assert len(written) == 2
  assert (tmp_path / 'data' / 'corpus' / 'input.txt').read_bytes() == TEXT
  (mirror / 'corpus' / 'input.txt').unlink()
  with raises_naming(FileNotFoundError, 'input.txt is not in the mirror',
                     '--mirror'):
    downloads.fetch(['corpus'], str(tmp_path / 'other'),
                    mirror=f'file://{mirror}', say=lambda _: None)
