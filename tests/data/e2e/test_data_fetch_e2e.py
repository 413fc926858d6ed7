"""The data commands: `tools.data fetch` from a local mirror and `list`
(a damaged file told apart from missing ones), a stalled or cut-short
download ending in one line, and a run whose dataset is missing naming the
command that fetches it."""

import http.server
import os
import subprocess
import sys
import threading

import pytest

from conftest import REPO
from conftest import SHARED_DATA as SHARED


def command(*args, data_dir):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.data', *args], cwd=REPO,
      capture_output=True, text=True, check=False,
      env={**os.environ, 'TRANSFORMER_DATA': str(data_dir)})


@pytest.mark.skipif(not os.path.isdir(SHARED), reason='no ../shared/data')
def test_the_command_fetches_from_a_mirror_and_lists(server, tmp_path):
  base, folder = server
  (folder / 'ptb').mkdir()
  for name in ('ptb.train.txt', 'ptb.valid.txt', 'ptb.test.txt'):
    with open(os.path.join(SHARED, 'ptb', name), 'rb') as f:
      (folder / 'ptb' / name).write_bytes(f.read())
  data = tmp_path / 'data'
  (data / 'tinyshakespeare').mkdir(parents=True)
  (data / 'tinyshakespeare' / 'input.txt').write_text('not Shakespeare')
  run = command('fetch', 'ptb', f'--mirror={base}', data_dir=data)
  assert run.returncode == 0, run.stderr[-2000:]
  assert f'3 file(s) fetched into {data}.' in run.stdout
  listed = command('list', data_dir=data).stdout
  assert f'Data folder: {data}' in listed
  assert [line.split()[:3] for line in listed.splitlines()
          if line.split()[:1] == ['ptb']] == [['ptb', 'ptb/', 'complete']]
  assert 'mnist/            4 missing' in listed
  assert 'tinyshakespeare/  1 damaged' in listed
  assert (f'Damaged: {data}/tinyshakespeare/input.txt is not the expected '
          f'file') in listed


class Misbehaving(http.server.BaseHTTPRequestHandler):
  """The issue's servers: tiny Shakespeare stalls (4 KB, then a byte now
  and then), PTB's files promise more bytes than they send."""

  def do_GET(self):  # pylint: disable=invalid-name
    self.send_response(200)
    self.send_header('Content-Length', '1000000')
    self.end_headers()
    self.wfile.write(b'x' * 4096)
    try:
      while 'tinyshakespeare' in self.path and not self.server.stop.wait(0.05):
        self.wfile.write(b'x')
        self.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
      pass

  def log_message(self, *args):
    del args


@pytest.fixture()
def misbehaving():
  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Misbehaving)
  httpd.stop = threading.Event()
  threading.Thread(target=httpd.serve_forever, args=(0.02,),
                   daemon=True).start()
  yield f'http://127.0.0.1:{httpd.server_address[1]}'
  httpd.stop.set()
  httpd.shutdown()
  httpd.server_close()


def error_line(run):
  """The command's error: one line, no traceback."""
  assert run.returncode == 2, run.stderr[-2000:]
  assert 'Traceback' not in run.stderr
  errors = [line for line in run.stderr.splitlines()
            if line.startswith('Error: ')]
  assert len(errors) == 1, run.stderr[-2000:]
  return errors[0]


def test_a_stalled_or_cut_short_download_ends_in_one_line(misbehaving,
                                                          tmp_path):
  data = tmp_path / 'data'
  stalled = error_line(command(
      'fetch', 'shakespeare', f'--mirror={misbehaving}', '--min_rate=50000',
      '--rate_window=0.3', '--deadline=60', data_dir=data))
  assert f'{misbehaving}/tinyshakespeare/input.txt: ' in stalled
  assert 'below the minimum rate 50000 B/s' in stalled
  assert 'lower --min_rate' in stalled and '--mirror' in stalled
  assert f'{data}/tinyshakespeare/input.txt by hand' in stalled
  cut = error_line(command('fetch', 'ptb', f'--mirror={misbehaving}',
                           data_dir=data))
  assert f'{misbehaving}/ptb/ptb.train.txt: the connection closed after ' \
      '4096 of 1000000 bytes, 4 times' in cut


def test_a_missing_dataset_names_the_command_that_fetches_it(tmp_path):
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.main',
       '--config=' + os.path.join(REPO, 'experiments', 'ptb.py:runlocal'),
       f'--workdir={tmp_path / "run"}'], cwd=REPO, capture_output=True,
      text=True, check=False,
      env={**os.environ, 'TRANSFORMER_DATA': str(tmp_path / 'data'),
           'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 66, run.stderr[-2000:]
  assert f'{tmp_path}/data/ptb/ptb.train.txt' in run.stderr
  assert 'python -m transformer.tools.data fetch ptb' in run.stderr
  assert 'Traceback' not in run.stderr
