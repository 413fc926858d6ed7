"""`explore --serve` of stand-in explorers: an image is sent as a file and
never opened from a path a request names, a stalled client holds up no
other, one gone before its answer is a line on the console, and requests
fired together are all answered (the server of a trained workdir:
e2e/test_explorer_server_e2e.py)."""

import collections
import socket
import struct
import threading
import time
import urllib.request

from conftest import explorer_get as get
from conftest import explorer_multipart as multipart
from conftest import explorer_request as request
from conftest import explorer_serve as serve
from transformer.tools import explorer_server


class _Recorder:
  """An image model's explorer that records what each request asks."""
  needs_text = needs_image = True

  def __init__(self):
    self.asked = []

  def page(self, text, image=None, form='', image_name=None):
    self.asked.append((text, image, image_name))
    return f'<!doctype html>{form}<p>ok</p>', []


def test_an_image_is_sent_as_a_file_never_named_by_a_path():
  recorder = _Recorder()
  server, port = serve(recorder, '', 'given.png')
  url = f'http://127.0.0.1:{port}'
  try:
    status, page = get(url + '/')
    assert status == 200
    assert 'type="file"' in page and 'enctype="multipart/form-data"' in page
    # A path in the request is never opened: the --image file is read.
    get(f'{url}/?input=what&image=/etc/passwd')
    body, headers = multipart({'input': 'what', 'image': '/etc/passwd'})
    request(url, 'POST', host='localhost', body=body, headers=headers)
    # A file sent is read from its bytes; none chosen (a browser sends an
    # empty file name) leaves the --image file.
    body, headers = multipart({'input': 'which', 'image': ('c\u05e9.png',
                                                           b'\x89PNG')})
    request(url, 'POST', host='localhost', body=body, headers=headers)
    body, headers = multipart({'input': 'who', 'image': ('', b'')})
    request(url, 'POST', host='localhost', body=body, headers=headers)
    assert recorder.asked == [
        ('', 'given.png', None),  # the --input and --image of the command
        ('what', 'given.png', None), ('what', 'given.png', None),
        ('which', b'\x89PNG', 'c\u05e9.png'), ('who', 'given.png', None)]
  finally:
    server.shutdown()
    server.server_close()


class _Slow:
  """A text model's explorer that takes `seconds` per page."""
  needs_text, needs_image = True, False

  def __init__(self, seconds: float = 0.0):
    self.seconds = seconds

  def page(self, text, image=None, form='', image_name=None):
    time.sleep(self.seconds)
    return f'<!doctype html>{form}<p>{"x" * 100_000}</p>', []


def test_a_stalled_client_holds_up_no_other(monkeypatch):
  """A local process that sends a form's headers and then waits: other
  pages are still answered, and it is dropped after READ_TIMEOUT."""
  monkeypatch.setattr(explorer_server, 'READ_TIMEOUT', 2, raising=False)
  server, port = serve(_Slow())
  try:
    with socket.create_connection(('127.0.0.1', port)) as stalled:
      stalled.sendall(b'POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: '
                      b'multipart/form-data; boundary=x\r\nContent-Length: '
                      b'100000\r\n\r\n--x\r\n')
      time.sleep(0.5)
      start = time.monotonic()
      with urllib.request.urlopen(f'http://127.0.0.1:{port}/?input=a+cat',
                                  timeout=10) as response:
        assert response.status == 200
      assert time.monotonic() - start < 2
      stalled.settimeout(10)
      assert stalled.recv(1000) == b''  # closed by the server, unanswered
  finally:
    server.shutdown()
    server.server_close()


def test_a_client_gone_before_the_answer_is_one_line(capsys):
  server, port = serve(_Slow(0.5))
  try:
    client = socket.create_connection(('127.0.0.1', port))
    client.sendall(b'GET /?input=a HTTP/1.1\r\nHost: localhost\r\n\r\n')
    # Closed with a reset, before the page is ready.
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                      struct.pack('ii', 1, 0))
    client.close()
    deadline = time.monotonic() + 20
    err = ''
    while 'went away' not in err and time.monotonic() < deadline:
      time.sleep(0.2)
      err += capsys.readouterr().err
  finally:
    server.shutdown()
    server.server_close()
  assert 'Traceback' not in err, err
  [line] = [l for l in err.splitlines() if 'went away' in l]
  assert line.startswith('explorer: 127.0.0.1:') and (
      'went away before the answer' in line), err


def test_forty_forms_posted_at_once_are_all_answered():
  """A page fires its requests together: none is reset by a listen queue
  shorter than them (socketserver's default of 5 reset most of 40)."""
  server, port = serve(_Slow())
  url = f'http://127.0.0.1:{port}'
  body, headers = multipart({'input': 'a cat'})
  together = threading.Barrier(40)
  answers = []

  def post():
    together.wait()
    try:
      answers.append(request(url, 'POST', host='localhost', body=body,
                             headers=headers)[0])
    except OSError as e:
      answers.append(type(e).__name__)

  try:
    assert server.request_queue_size >= 64
    posters = [threading.Thread(target=post) for _ in range(40)]
    for poster in posters:
      poster.start()
    for poster in posters:
      poster.join(60)
  finally:
    server.shutdown()
    server.server_close()
  assert collections.Counter(answers) == {200: 40}
