"""Fetching the real datasets: every file checked by its SHA-256 before it
is put in place, files already right kept, wrong ones refused, archives'
members extracted, a re-compressed .gz accepted, offline a list of what to
put where, and a missing dataset's error naming the command (the commands:
e2e/test_data_fetch_e2e.py). A local HTTP server (the `server` fixture of
conftest.py) stands in for the sources: nothing reaches the network."""

import gzip
import hashlib
import os
import zipfile

import pytest

from conftest import raises_naming
from conftest import SHARED_DATA as SHARED
from transformer.data import downloads

TEXT = b'one line\nanother line\n'
TSV = b'index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n'


def sha(data):
  return hashlib.sha256(data).hexdigest()


@pytest.fixture()
def table(server, monkeypatch):
  """Two small datasets served locally: a text and a .gz file, and a .zip
  whose member is the file."""
  base, folder = server
  (folder / 'corpus.txt').write_bytes(TEXT)
  (folder / 'words.gz').write_bytes(gzip.compress(TEXT, mtime=0))
  with zipfile.ZipFile(folder / 'Task.zip', 'w') as archive:
    archive.writestr('Task/train.tsv', TSV)
    archive.writestr('Task/test.tsv', b'not wanted')
  fake = {
      'corpus': downloads.Dataset('corpus', 'a corpus', (
          downloads.File('input.txt', f'{base}/corpus.txt', sha(TEXT)),
          downloads.File('words.gz', f'{base}/words.gz', sha(TEXT)))),
      'task': downloads.Dataset('glue/Task', 'a task', (
          downloads.File('train.tsv', f'{base}/Task.zip', sha(TSV),
                        member='Task/train.tsv'),)),
  }
  monkeypatch.setattr(downloads, 'DATASETS', fake)
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
  assert not [p for p in data.rglob('.fetching-*')]  # no temporary left
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


def test_offline_lists_each_file_and_where_it_goes(table, tmp_path,
                                                   monkeypatch):
  def unreachable(url):
    raise OSError(101, 'Network is unreachable')
  with pytest.raises(OSError) as error:
    downloads.fetch(['all'], str(tmp_path), opener=unreachable)
  message = str(error.value)
  assert '3 file(s)' in message and 'Network is unreachable' in message
  assert f'{tmp_path}/corpus/input.txt  <-  http://' in message
  assert f'{tmp_path}/glue/Task/train.tsv  <-  Task/train.tsv from ' in \
      message


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
