"""`python -m transformer.tools.architecture` as a user runs it: --check
fails on a stale page, and without it the layout block is written."""

import os

from conftest import REPO

PAGE = os.path.join(REPO, 'docs', 'api', 'index.md')


def test_the_layout_command_checks_and_writes(tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  with open(PAGE, encoding='utf-8') as f:
    page = f.read()
  stale = tmp_path / 'index.md'
  stale.write_text(page.replace('Entry point: train and evaluate', 'Old'))
  command = [sys.executable, '-m', 'transformer.tools.architecture',
             f'--page={stale}']
  checked = subprocess.run(command + ['--check'], capture_output=True,
                           text=True, check=False)
  assert checked.returncode == 1, checked.stderr
  assert str(stale) in checked.stderr
  assert 'python -m transformer.tools.architecture' in checked.stderr
  assert stale.read_text() != page
  subprocess.run(command, check=True, capture_output=True)
  assert stale.read_text() == page
