"""`explore --serve`: bound to 127.0.0.1 only, a typed input gives the same
page `explore` writes for it (with the form above), and bad input a 400
that names the fix."""

import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from transformer.tools import explore
from transformer.tools import explorer_server

TEXT = 'the red house sees a cat'


def data_of(page: str) -> dict:
  return json.loads(re.search(r'const DATA = (.*?);</script>', page,
                              re.S).group(1).replace('<\\/', '</'))


@pytest.fixture(scope='module')
def served(trained):
  model = explore.Explorer(str(trained))
  server = explorer_server.make_server(model, 0)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield model, f'http://127.0.0.1:{server.server_address[1]}'
  server.shutdown()
  server.server_close()


def get(url: str) -> tuple[int, str]:
  try:
    with urllib.request.urlopen(url, timeout=60) as response:
      return response.status, response.read().decode('utf-8')
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode('utf-8')


def test_binds_only_the_loopback_interface(trained):
  server = explorer_server.make_server(explore.Explorer(str(trained)), 0)
  try:
    assert server.server_address[0] == '127.0.0.1'
  finally:
    server.server_close()


def test_a_typed_input_gives_the_page_explore_writes(served, tmp_path):
  model, url = served
  status, page = get(f'{url}/?' + urllib.parse.urlencode({'input': TEXT}))
  assert status == 200
  assert f'value="{TEXT}"' in page  # the form keeps what was typed
  path, _ = explore.explore(str(model.workdir), TEXT, str(tmp_path / 'p.html'))
  assert data_of(page) == data_of(open(path, encoding='utf-8').read())
  other = data_of(get(f'{url}/?input=a+cat')[1])
  assert other['input'] == 'a cat' and other != data_of(page)


def test_the_form_alone_and_bad_input_named(served):
  _, url = served
  status, page = get(url + '/')
  assert status == 200 and '<form' in page and 'const DATA' not in page
  status, page = get(f'{url}/?input=a+cat&image=scene.png')
  assert status == 400 and 'reads no image' in page
  assert get(url + '/elsewhere')[0] == 404
