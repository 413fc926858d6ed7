"""How `downloads.fetch` meets a misbehaving server: a stall stops at the
minimum rate or the deadline, a body cut short is asked again from where
it stopped (a Range request continuing the .part file, or the whole file
where the server ignores ranges), a 5xx is retried, a .part file left by
an earlier run is continued, and each failure is one line naming the URL
and the fix. The servers are scripted here, on loopback; tiny limits keep
every test well under a second."""

import http.server
import io
import threading
import time

import pytest

from conftest import raises_naming
from transformer.data import downloads

DATA = bytes(i * 7 % 251 for i in range(50_000))
FAST = dict(retries=3, backoff=0.0)  # no pauses between retries


class Answers(http.server.BaseHTTPRequestHandler):
  """Answers GET with the scripted server's next answer; HTTP/1.0, so
  that returning closes the connection (a body cut short)."""

  def do_GET(self):  # pylint: disable=invalid-name
    self.server.asked.append(self.headers.get('Range'))
    answers = self.server.answers
    answer = answers.pop(0) if len(answers) > 1 else answers[0]
    try:
      answer(self)
    except (BrokenPipeError, ConnectionResetError):
      pass  # the client gave up, as it should

  def log_message(self, *args):
    del args


def send(handler, status, body, headers=()):
  handler.send_response(status)
  for name, value in headers:
    handler.send_header(name, value)
  handler.end_headers()
  handler.wfile.write(body)


def whole(handler, data=DATA):
  """The file, ignoring any Range."""
  send(handler, 200, data, [('Content-Length', str(len(data)))])


def ranged(handler, data=DATA):
  """The file, or the part a Range asks for."""
  asked = handler.headers.get('Range')
  if not asked:
    whole(handler, data)
    return
  start = int(asked.removeprefix('bytes=').removesuffix('-'))
  send(handler, 206, data[start:], [
      ('Content-Length', str(len(data) - start)),
      ('Content-Range', f'bytes {start}-{len(data) - 1}/{len(data)}')])


def cut_after(count):
  """Promises the whole file (Content-Length), sends `count` bytes and
  closes."""
  def answer(handler):
    handler.send_response(200)
    handler.send_header('Content-Length', str(len(DATA)))
    handler.end_headers()
    handler.wfile.write(DATA[:count])
  return answer


def unavailable(handler):
  send(handler, 503, b'busy', [('Content-Length', '4')])


@pytest.fixture()
def scripted(monkeypatch, tmp_path):
  """A loopback server answering in the order a test sets (`answers`, the
  last one kept), noting each request's Range (`asked`); `fetch()` fetches
  the one-file dataset 'blob' (DATA) from it into tmp_path/data."""
  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Answers)
  httpd.answers, httpd.asked, httpd.stop = [whole], [], threading.Event()
  thread = threading.Thread(target=httpd.serve_forever, args=(0.02,),
                            daemon=True)
  thread.start()
  httpd.url = f'http://127.0.0.1:{httpd.server_address[1]}/blob.bin'
  httpd.path = tmp_path / 'data' / 'blob' / 'blob.bin'
  monkeypatch.setattr(downloads, 'DATASETS', {'blob': downloads.Dataset(
      'blob', 'a blob', (downloads.File(
          'blob.bin', httpd.url, downloads.content_sha256(DATA, 'blob.bin')),
                         ))})

  def fetch(progress=None, **limits):
    return downloads.fetch(['blob'], str(tmp_path / 'data'), say=print,
                           limits=downloads.Limits(**{**FAST, **limits}),
                           progress=progress or io.StringIO())
  httpd.fetch = fetch
  yield httpd
  httpd.stop.set()  # ends the trickles
  httpd.shutdown()
  httpd.server_close()


def trickle(head, every, step=1):
  """Promises the file, sends `head` bytes, then `step` bytes every
  `every` seconds until the client leaves or the test ends."""
  def answer(handler):
    handler.send_response(200)
    handler.send_header('Content-Length', str(len(DATA)))
    handler.end_headers()
    handler.wfile.write(DATA[:head])
    handler.wfile.flush()
    sent = head
    while not handler.server.stop.wait(every) and sent < len(DATA):
      handler.wfile.write(DATA[sent:sent + step])
      handler.wfile.flush()
      sent += step
  return answer


def test_a_stalled_download_stops_at_the_minimum_rate(scripted):
  # The mirror: 4 KB, then a byte now and then.
  scripted.answers = [trickle(4096, every=0.05)]
  started = time.monotonic()
  with raises_naming(downloads.DownloadError, scripted.url,
                     'below the minimum rate 2000 B/s', '--min_rate',
                     '--mirror', f'{scripted.path} by hand',
                     f'kept in {scripted.path}.part'):
    scripted.fetch(min_rate=2000, window=0.2, deadline=60)
  assert time.monotonic() - started < 5  # not the 60 s deadline
  assert len(scripted.asked) == 1  # a stall is not asked again
  part = scripted.path.with_name('blob.bin.part')
  assert part.read_bytes() == DATA[:part.stat().st_size]
  assert not scripted.path.exists()


@pytest.mark.parametrize('headers', [True, False])
def test_a_silent_server_stops_at_the_minimum_rate(scripted, headers):
  def silent(handler):
    if headers:
      handler.send_response(200)
      handler.send_header('Content-Length', str(len(DATA)))
      handler.end_headers()
      handler.wfile.flush()
    handler.server.stop.wait(30)
  scripted.answers = [silent]
  started = time.monotonic()
  with raises_naming(downloads.DownloadError, scripted.url,
                     'nothing received for 0.2 s', '--min_rate'):
    scripted.fetch(window=0.2, deadline=60)
  assert time.monotonic() - started < 5
  assert len(scripted.asked) == 1  # not retried by urllib3 either


def test_a_slow_download_stops_at_its_deadline(scripted):
  # Fast enough for the minimum rate, too slow for the deadline.
  scripted.answers = [trickle(0, every=0.01, step=100)]
  started = time.monotonic()
  with raises_naming(downloads.DownloadError, scripted.url,
                     'not complete after 0.4 s', f'of {len(DATA)} bytes',
                     '--deadline', f'{scripted.path} by hand'):
    scripted.fetch(min_rate=10, window=0.1, deadline=0.4)
  assert time.monotonic() - started < 5


def test_a_body_cut_short_is_continued_with_a_range(scripted):
  scripted.answers = [cut_after(10_000), ranged]
  assert scripted.fetch() == [str(scripted.path)]
  assert scripted.path.read_bytes() == DATA
  assert scripted.asked == [None, 'bytes=10000-']
  assert not scripted.path.with_name('blob.bin.part').exists()


def test_a_server_without_ranges_sends_it_again_from_the_start(scripted):
  scripted.answers = [cut_after(10_000), whole]
  scripted.fetch()
  assert scripted.path.read_bytes() == DATA  # not the first part twice
  assert scripted.asked == [None, 'bytes=10000-']


def test_a_body_cut_short_every_time_is_one_named_error(scripted):
  scripted.answers = [cut_after(1000)]
  with raises_naming(downloads.DownloadError, scripted.url,
                     f'closed after 1000 of {len(DATA)} bytes, 3 times',
                     '--mirror', f'{scripted.path} by hand'):
    scripted.fetch(retries=2)
  assert len(scripted.asked) == 3
  assert not scripted.path.exists()


def test_a_part_file_left_by_an_earlier_run_is_continued(scripted):
  scripted.answers = [ranged]
  part = scripted.path.with_name('blob.bin.part')
  part.parent.mkdir(parents=True)
  part.write_bytes(DATA[:20_000])
  scripted.fetch()
  assert scripted.asked == ['bytes=20000-']
  assert scripted.path.read_bytes() == DATA


def test_a_part_file_of_other_bytes_is_not_put_in_place(scripted):
  scripted.answers = [ranged]
  part = scripted.path.with_name('blob.bin.part')
  part.parent.mkdir(parents=True)
  part.write_bytes(b'x' * 20_000)  # the source changed since
  with raises_naming(ValueError, scripted.url, 'nothing was written'):
    scripted.fetch()
  assert not scripted.path.exists() and not part.exists()  # starts over


def test_a_complete_part_file_is_checked_not_downloaded(scripted):
  def not_satisfiable(handler):
    send(handler, 416, b'', [('Content-Range', f'bytes */{len(DATA)}'),
                             ('Content-Length', '0')])
  scripted.answers = [not_satisfiable]
  part = scripted.path.with_name('blob.bin.part')
  part.parent.mkdir(parents=True)
  part.write_bytes(DATA)  # the run stopped before moving it
  scripted.fetch()
  assert scripted.path.read_bytes() == DATA


def test_an_unavailable_server_is_asked_again(scripted):
  scripted.answers = [unavailable, unavailable, whole]
  scripted.fetch()
  assert scripted.path.read_bytes() == DATA
  assert len(scripted.asked) == 3


def test_a_server_unavailable_every_time_is_listed(scripted):
  scripted.answers = [unavailable]
  with raises_naming(OSError, f'{scripted.url}: HTTP 503',
                     f'{scripted.path}  <-  {scripted.url}'):
    scripted.fetch(retries=1)
  assert len(scripted.asked) == 2


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_a_terminal_shows_a_progress_bar_a_log_none(scripted, capsys):
  terminal = Terminal()
  scripted.fetch(progress=terminal)
  assert 'blob.bin:' in terminal.getvalue()  # the file's bar, of its size
  assert '/48.8k [' in terminal.getvalue()
  scripted.path.unlink()
  log = io.StringIO()
  scripted.fetch(progress=log)
  assert log.getvalue() == ''
  fetched = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith('Fetched')]
  assert fetched[-1].startswith(f'Fetched {scripted.path} ({len(DATA)} '
                                'bytes in ')


def test_a_part_other_than_asked_starts_the_file_over(scripted):
  def from_the_start(handler):
    send(handler, 206, DATA, [
        ('Content-Length', str(len(DATA))),
        ('Content-Range', f'bytes 0-{len(DATA) - 1}/{len(DATA)}')])
  scripted.answers = [from_the_start, whole]
  part = scripted.path.with_name('blob.bin.part')
  part.parent.mkdir(parents=True)
  part.write_bytes(DATA[:20_000])
  scripted.fetch()
  assert scripted.asked == ['bytes=20000-', None]
  assert scripted.path.read_bytes() == DATA
