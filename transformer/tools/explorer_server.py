"""`explore --serve`: the explorer page for inputs typed into a form, served
on 127.0.0.1 only (the model and the files it may read are this machine's:
no other interface is ever bound)."""

from __future__ import annotations

import html
import http.server
import sys
import urllib.parse
from typing import Any

HOST = '127.0.0.1'


def form(explorer: Any, text: str, image: str | None) -> str:
  """The HTML form above each served page, holding the current input."""
  fields = []
  if explorer.needs_text:
    fields.append('<label>input <input name="input" size="60" value="'
                  f'{html.escape(text)}"></label>')
  if explorer.needs_image:
    fields.append('<label>image file on this machine <input name="image" '
                  f'size="40" value="{html.escape(image or "")}"></label>')
  return ('<form id="ask" method="get" action="/">'
          + ' '.join(fields) + ' <button>show attention</button></form>')


def make_server(explorer: Any, port: int, text: str = '',
                image: str | None = None) -> http.server.HTTPServer:
  """A server (not yet serving) of `explorer`'s pages on 127.0.0.1:`port`;
  `text` and `image` answer a request that gives neither.

  `explorer` is a `tools.explore.Explorer`: `page(text, image, form)`
  returns (HTML, views) or raises ValueError naming what to fix, which the
  server shows with status 400. One request at a time: the model is one.
  """

  class Handler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):  # noqa: N802 (the http.server name)
      url = urllib.parse.urlsplit(self.path)
      if url.path != '/':
        self._send(404, f'<p>No page {html.escape(url.path)}; the '
                        'explorer is at /.</p>')
        return
      query = urllib.parse.parse_qs(url.query)
      asked = 'input' in query or 'image' in query
      question = query.get('input', [''])[0] if asked else text
      picture = (query.get('image', [''])[0] or None) if asked else image
      ask = form(explorer, question, picture)
      if not (question or picture):
        self._send(200, f'<!doctype html><meta charset="utf-8">'
                        f'<title>Attention explorer</title>{ask}')
        return
      try:
        page, _ = explorer.page(question, picture, ask)
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

  return http.server.HTTPServer((HOST, port), Handler)
