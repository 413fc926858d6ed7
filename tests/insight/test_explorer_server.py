"""`explore --serve`: bound to 127.0.0.1 only and answering only requests
for a loopback host name (DNS rebinding gets 403), a typed input gives the
same page `explore` writes for it (with the form above), an image is sent
as a file and never opened from a path a request names, hostile text comes
back exactly, bad input a 400 that names the fix, a bad or busy --port
a one-line error, a stalled client holds up no other, and one gone before
its answer is a line on the console."""

import html.parser
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import REPO
from transformer.tools import explore
from transformer.tools import explorer_server

TEXT = 'the red house sees a cat'


def data_of(page: str) -> dict:
  return json.loads(re.search(r'const DATA = (.*?);</script>', page,
                              re.S).group(1))


def serve(explorer, *args) -> tuple[str, int]:
  server = explorer_server.make_server(explorer, 0, *args)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server, server.server_address[1]


@pytest.fixture(scope='module')
def served(trained):
  model = explore.Explorer(str(trained))
  server, port = serve(model)
  yield model, f'http://127.0.0.1:{port}'
  server.shutdown()
  server.server_close()


def get(url: str) -> tuple[int, str]:
  try:
    with urllib.request.urlopen(url, timeout=60) as response:
      return response.status, response.read().decode('utf-8')
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode('utf-8')


def request(url: str, method: str = 'GET', path: str = '/',
            host: str | None = None, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, str]:
  """One request with the Host header `host` (None: no Host header)."""
  connection = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc,
                                          timeout=60)
  connection.putrequest(method, path, skip_host=True)
  for name, value in ({} if host is None else {'Host': host}
                      ).items() | (headers or {}).items():
    connection.putheader(name, value)
  if body is not None:
    connection.putheader('Content-Length', str(len(body)))
  connection.endheaders(body)
  response = connection.getresponse()
  answer = response.status, response.read().decode('utf-8')
  connection.close()
  return answer


def multipart(fields: dict) -> tuple[bytes, dict]:
  """A form's body as a browser sends it: {name: text or (file name,
  bytes)}; and its Content-Type header."""
  boundary = 'XyZzYboundary'
  parts = []
  for name, value in fields.items():
    if isinstance(value, tuple):
      head = (f'Content-Disposition: form-data; name="{name}"; filename='
              f'"{value[0]}"\r\nContent-Type: application/octet-stream')
      content = value[1]
    else:
      head = f'Content-Disposition: form-data; name="{name}"'
      content = value.encode('utf-8')
    parts.append(f'--{boundary}\r\n{head}\r\n\r\n'.encode() + content
                 + b'\r\n')
  body = b''.join(parts) + f'--{boundary}--\r\n'.encode()
  return body, {'Content-Type': f'multipart/form-data; boundary={boundary}'}


def test_binds_only_the_loopback_interface(trained):
  server = explorer_server.make_server(explore.Explorer(str(trained)), 0)
  try:
    assert server.server_address[0] == '127.0.0.1'
  finally:
    server.server_close()


@pytest.mark.parametrize('host', [
    'evil.example', 'evil.example:{port}', '127.0.0.1.evil.example',
    'localhost.evil.example:{port}', 'evil.localhost', '[::1].evil.example',
    '127.0.0.2', '0.0.0.0:{port}', '', None])
def test_other_host_names_get_403(served, host):
  """A page of another site whose name is rebound to 127.0.0.1 sends its
  own name as Host: refused, whatever it asks for."""
  _, url = served
  port = urllib.parse.urlsplit(url).port
  host = None if host is None else host.format(port=port)
  for method, path in (('GET', '/'), ('GET', '/?input=a+cat'),
                       ('GET', '/elsewhere'), ('POST', '/')):
    status, page = request(url, method, path, host, b'' if method == 'POST'
                           else None)
    assert status == 403, (method, path, host, status)
    assert 'loopback' in page and 'const DATA' not in page


@pytest.mark.parametrize('host', ['localhost', '127.0.0.1', '[::1]',
                                  'LOCALHOST:{port}', '127.0.0.1:{port}',
                                  '[::1]:{port}'])
def test_loopback_host_names_are_answered(served, host):
  _, url = served
  port = urllib.parse.urlsplit(url).port
  status, page = request(url, host=host.format(port=port))
  assert status == 200 and '<form' in page


def test_a_typed_input_gives_the_page_explore_writes(served, tmp_path):
  model, url = served
  status, page = get(f'{url}/?' + urllib.parse.urlencode({'input': TEXT}))
  assert status == 200
  assert f'value="{TEXT}"' in page  # the form keeps what was typed
  path, _ = explore.explore(str(model.workdir), TEXT, str(tmp_path / 'p.html'))
  assert data_of(page) == data_of(open(path, encoding='utf-8').read())
  other = data_of(get(f'{url}/?input=a+cat')[1])
  assert other['input'] == 'a cat' and other != data_of(page)
  body, headers = multipart({'input': 'a cat'})
  assert data_of(request(url, 'POST', host='localhost', body=body,
                         headers=headers)[1]) == other


class _Values(html.parser.HTMLParser):
  """The value attributes of a page's <input> elements, by name."""

  def __init__(self, page):
    super().__init__()
    self.values = {}
    self.feed(page)

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if tag == 'input':
      self.values[attrs.get('name')] = attrs.get('value')


def test_hostile_input_comes_back_exactly(served):
  _, url = served
  text = ' '.join(['</script>', '<!--<script>', '"><b>', "'", '/*DATA*/',
                   '/*SCRIPT*/', '<!--FORM-->', '&amp;', '😀', 'שלום',
                   'a\u2028b'])
  status, page = get(f'{url}/?' + urllib.parse.urlencode({'input': text}))
  assert status == 200
  assert _Values(page).values['input'] == text  # the form's field
  assert data_of(page)['input'] == text
  assert page.lower().count('</script') == 2
  assert '<b>' not in page


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


def test_the_form_alone_and_bad_input_named(served):
  _, url = served
  status, page = get(url + '/')
  assert status == 200 and '<form' in page and 'const DATA' not in page
  body, headers = multipart({'input': 'a cat', 'image': ('s.png', b'\x89')})
  status, page = request(url, 'POST', host='localhost', body=body,
                         headers=headers)
  assert status == 400 and 'reads no image' in page
  assert get(url + '/elsewhere')[0] == 404


def command(*args):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.explore', *args], cwd=REPO,
      capture_output=True, text=True, timeout=300, check=False,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


@pytest.mark.parametrize('port', ['-1', '65536', 'eighty', '80.5'])
def test_a_port_out_of_range_is_a_flag_error(port, trained):
  out = command(f'--workdir={trained}', '--serve', f'--port={port}')
  assert out.returncode == 2, out.stderr
  assert f'--port={port}' in out.stderr and 'Traceback' not in out.stderr
  assert len(out.stderr.strip().splitlines()) <= 2, out.stderr


def test_a_port_in_use_is_named_with_another_to_try(trained):
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    out = command(f'--workdir={trained}', '--serve', f'--port={port}')
  assert out.returncode == 2, out.stderr
  assert 'Traceback' not in out.stderr
  [line] = [l for l in out.stderr.splitlines() if l.startswith('Error')]
  assert f'--port={port} is in use' in line and '--port=0' in line


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
