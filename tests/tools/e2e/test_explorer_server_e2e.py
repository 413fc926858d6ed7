"""`explore --serve` of a trained workdir: bound to 127.0.0.1 only and
answering only requests for a loopback host name (DNS rebinding gets 403),
a typed input gives the same page `explore` writes for it (with the form
above), hostile text comes back exactly, bad input a 400 that names the
fix, and a bad or busy --port a one-line error."""

import html.parser
import json
import os
import re
import socket
import subprocess
import sys
import urllib.parse

import pytest

from conftest import explorer_get as get
from conftest import explorer_multipart as multipart
from conftest import explorer_request as request
from conftest import explorer_serve as serve
from conftest import REPO
from transformer.tools import explore
from transformer.tools import explorer_server


TEXT = 'the red house sees a cat'


def data_of(page: str) -> dict:
  return json.loads(re.search(r'const DATA = (.*?);</script>', page,
                              re.S).group(1))


@pytest.fixture(scope='module')
def served(trained):
  model = explore.Explorer(str(trained))
  server, port = serve(model)
  yield model, f'http://127.0.0.1:{port}'
  server.shutdown()
  server.server_close()


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


def test_the_form_alone_and_bad_input_named(served):
  _, url = served
  status, page = get(url + '/')
  assert status == 200 and '<form' in page and 'const DATA' not in page
  body, headers = multipart({'input': 'a cat', 'image': ('s.png', b'\x89')})
  status, page = request(url, 'POST', host='localhost', body=body,
                         headers=headers)
  assert status == 400 and 'no image' in page and '--image' in page
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
  assert f'--port={port}' in line and 'in use' in line and '--port=0' in line
