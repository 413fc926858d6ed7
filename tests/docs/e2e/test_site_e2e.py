"""The documentation site builds in strict mode (`mkdocs build --strict`,
as a reader builds it): a broken link or anchor, a page missing from the
nav's files, or a docstring that griffe cannot parse fails here. The API
reference has a page for every module."""

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO


def test_the_site_builds_strict_with_a_page_per_module(tmp_path):
  pytest.importorskip('mkdocstrings_handlers.python',
                      reason='the site needs the docs extra: pip install '
                      '-e ".[docs]"')
  site = tmp_path / 'site'
  built = subprocess.run(
      [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir',
       str(site)], cwd=REPO, capture_output=True, text=True, check=False,
      env={**os.environ, 'NO_MKDOCS_2_WARNING': '1'})
  assert built.returncode == 0, built.stderr[-5000:]
  spec = importlib.util.spec_from_file_location(
      'api_pages', os.path.join(REPO, 'docs', 'api_pages.py'))
  api_pages = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(api_pages)
  missing = [name for name in api_pages.modules()
             if not (site / api_pages.page(name)[:-3] / 'index.html').exists()]
  assert not missing, missing
  kernels = (site / 'api' / 'transformer' / 'attention' / 'kernels' /
             'index.html').read_text(encoding='utf-8')
  assert 'dot_product_attention' in kernels and 'key_lengths' in kernels
  index = (site / 'api' / 'index.html').read_text(encoding='utf-8')
  assert 'floor 10' in index and 'architecture.py' in index
