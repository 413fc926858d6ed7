"""Hostile text (`</script>`, `<!--<script>`, ...) in the explorer page
comes back exactly from the written HTML (the page of a trained workdir in
a real browser: e2e/test_explorer_e2e.py)."""

import json
import re

from conftest import HOSTILE


def test_hostile_text_stays_inside_the_inlined_data(hostile):
  path, view = hostile
  page = path.read_text(encoding='utf-8')
  # The page's two scripts end where the page ends them, and hold nothing
  # that switches the HTML parser's script states ('<!--' then '<script'
  # makes it skip the next '</script>': the page was blank).
  scripts = re.findall(r'<script>(.*?)</script>', page, re.S)
  assert len(scripts) == 2 and page.lower().count('</script') == 2
  for script in scripts:
    assert '<!--' not in script and '<script' not in script.lower()
  # The data decodes, as written, back to the exact strings.
  data = json.loads(scripts[0].removeprefix('const DATA = ').removesuffix(';'))
  assert data['title'] == '<!--<script> ' + HOSTILE[-1]
  assert data['input'] == ''.join(HOSTILE)
  [shown] = data['views']
  assert (shown['name'], shown['queries'], shown['keys']) == (
      view.name, HOSTILE, HOSTILE[::-1])
  assert '\u2028' not in scripts[0] and '\u2029' not in scripts[0]
