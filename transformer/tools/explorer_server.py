"""`explore --serve`: the explorer page for inputs typed into a form, served
on 127.0.0.1 only (the model and the files it may read are this machine's:
no other interface is ever bound).

Binding loopback is not enough: a page of another site can rebind its own
host name to 127.0.0.1 (DNS rebinding) and then read this server's answers
as its own. Such a request names that site in its Host header, so only
requests for a loopback name are answered (others get 403). The server
answers one page, `/`, and opens no path a request names: an image is sent
as a file, by the form.
"""

from __future__ import annotations

import email.parser
import email.policy
import errno
import html
import http.server
import re
import sys
import threading
import urllib.parse
from typing import Any

HOST = '127.0.0.1'
# The names under which a browser on this machine reaches the server.
_LOOPBACK = re.compile(r'(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?', re.I)
_MAX_BODY = 64 << 20  # bytes of a form sent: an image file and a text
# Seconds a client may leave the server waiting for the next bytes of its
# request (a slow form upload still goes on as long as bytes keep coming).
READ_TIMEOUT = 30


def form(explorer: Any, text: str) -> str:
  """The HTML form above each served page, holding the current text."""
  fields = []
  if explorer.needs_text:
    fields.append('<label>input <input name="input" size="60" value="'
                  f'{html.escape(text)}"></label>')
  if explorer.needs_image:
    fields.append('<label>image file <input type="file" name="image" '
                  'accept="image/*"></label>')
  return ('<form id="ask" method="post" action="/" '
          'enctype="multipart/form-data">'
          + ' '.join(fields) + ' <button>show attention</button></form>')


class _Server(http.server.ThreadingHTTPServer):
  """A thread per connection, so that a client that stalls (headers
  sent, the body not) holds up no other; a failed connection logged in one
  line, not a traceback."""

  # Ctrl-C does not wait for a stalled client's thread.
  block_on_close = False
  # A page fires its requests together (a form, its images, a reload):
  # socketserver's listen queue of 5 made the kernel reset all but a
  # handful of 40 connections opened at once.
  request_queue_size = 128

  def handle_error(self, request, client_address) -> None:
    error = sys.exc_info()[1]
    where = f'{client_address[0]}:{client_address[1]}'
    if isinstance(error, (ConnectionError, TimeoutError)):
      print(f'explorer: {where} went away before the answer '
            f'({type(error).__name__}).', file=sys.stderr, flush=True)
    else:
      print(f'explorer: the request from {where} failed: '
            f'{type(error).__name__}: {error}', file=sys.stderr, flush=True)


def make_server(explorer: Any, port: int, text: str = '',
                image: str | None = None) -> http.server.HTTPServer:
  """A server (not yet serving) of `explorer`'s pages on 127.0.0.1:`port`;
  `text` and the `image` file answer a request that gives neither.

  `explorer` is a `tools.explore.Explorer`: `page(text, image, form,
  image_name)` returns (HTML, views) or raises ValueError naming what to
  fix, which the server shows with status 400. Requests are read side by
  side (a client that stops sending is dropped after READ_TIMEOUT
  seconds), and the model answers one at a time: it is one. OSError naming
  --port where the port is taken.
  """
  model = threading.Lock()

  class Handler(http.server.BaseHTTPRequestHandler):
    timeout = READ_TIMEOUT  # per read and write of the connection

    def do_GET(self):  # noqa: N802 (the http.server name)
      if self._refused():
        return
      # Text only: an `image` here would be a path, which is never opened.
      query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
      self._answer(query['input'][0] if 'input' in query else text, None)

    def do_POST(self):  # noqa: N802
      if self._refused():
        return
      try:
        length = int(self.headers.get('Content-Length', ''))
      except ValueError:
        length = -1
      if not 0 <= length <= _MAX_BODY:
        self._send(413, f'<p>Send a form of at most {_MAX_BODY >> 20} '
                        'MiB.</p>')
        return
      parts = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
          f'Content-Type: {self.headers.get("Content-Type", "")}\r\n\r\n'
          .encode('latin-1') + self.rfile.read(length))
      fields = {part.get_param('name', header='content-disposition'): part
                for part in parts.iter_parts()}
      question = (fields['input'].get_payload(decode=True).decode(
          'utf-8', 'replace') if 'input' in fields else text)
      sent = fields.get('image')
      # A browser sends an empty file name where no file was chosen.
      if sent is not None and sent.get_filename():
        self._answer(question, sent.get_payload(decode=True),
                     sent.get_filename())
      else:
        self._answer(question, None)

    def _refused(self) -> bool:
      """403 unless the request names a loopback host (see the module
      docstring): and nothing else is read from it."""
      hosts = self.headers.get_all('Host') or []
      if len(hosts) == 1 and _LOOPBACK.fullmatch(hosts[0].strip()):
        return False
      self._send(403, '<p>The explorer answers only pages opened on this '
                      'machine (http://127.0.0.1 or http://localhost): '
                      'loopback host names.</p>')
      return True

    def _answer(self, question: str, upload: bytes | None,
                name: str | None = None) -> None:
      """The page for `question` and the `upload`ed image file (None: the
      --image file); the form alone where there is neither."""
      if urllib.parse.urlsplit(self.path).path != '/':
        self._send(404, f'<p>No page {html.escape(self.path)}; the '
                        'explorer is at /.</p>')
        return
      picture = upload if upload is not None else image
      ask = form(explorer, question)
      if not (question or picture):
        self._send(200, f'<!doctype html><meta charset="utf-8">'
                        f'<title>Attention explorer</title>{ask}')
        return
      try:
        with model:
          page, _ = explorer.page(question, picture, ask, name)
      except ValueError as e:
        self._send(400, f'<!doctype html><meta charset="utf-8">'
                        f'<title>Attention explorer</title>{ask}'
                        f'<p class="error">{html.escape(str(e))}</p>')
        return
      self._send(200, page)

    def _send(self, status: int, body: str) -> None:
      data = body.encode('utf-8')
      self.send_response(status)
      self.send_header('Content-Type', 'text/html; charset=utf-8')
      self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (the base's name)
      print(f'explorer: {format % args}', file=sys.stderr)

  try:
    return _Server((HOST, port), Handler)
  except OSError as e:
    if e.errno != errno.EADDRINUSE:
      raise
    raise OSError(f'--port={port} is in use on {HOST}: give another, e.g. '
                  f'--port={port + 1 if port < 65535 else 8000}, or --port=0 '
                  f'for any free port.') from e
