"""The site's generated parts (docs/api_pages.py, docs/grouped_args.py):
a page per module, found in the tree, and Args entries that name several
parameters split one per name. The whole site is built strict in
e2e/test_site_e2e.py."""

import importlib.util
import os

import pytest

from conftest import REPO


def _docs_module(name: str):
  """docs/NAME.py, which mkdocs loads by path (it is no package)."""
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(REPO, 'docs', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.fixture(name='api_pages')
def fixture_api_pages():
  pytest.importorskip('mkdocs', reason='the site needs the docs extra: '
                      'pip install -e ".[docs]"')
  return _docs_module('api_pages')


@pytest.fixture(name='grouped_args')
def fixture_grouped_args():
  pytest.importorskip('griffe', reason='the site needs the docs extra: '
                      'pip install -e ".[docs]"')
  return _docs_module('grouped_args')


def test_a_new_module_gets_a_page_and_a_place_in_the_nav(api_pages,
                                                         tmp_path):
  package = tmp_path / 'transformer'
  (package / 'data' / '__pycache__').mkdir(parents=True)
  for name in ('__init__.py', 'train.py', '_private.py', 'data/__init__.py',
               'data/new_source.py', 'data/__pycache__/x.py'):
    (package / name).write_text('"""A module."""\n')
  (package / 'data' / 'page.html').write_text('<title>Not python</title>')
  (package / 'notes').mkdir()  # no __init__.py: no package
  (package / 'notes' / 'draft.py').write_text('')
  names = api_pages.modules(str(tmp_path))
  assert names == ['transformer', 'transformer.data',
                   'transformer.data.new_source', 'transformer.train']
  assert api_pages.page('transformer.data.new_source') == (
      'api/transformer/data/new_source.md')
  assert api_pages.nav(names) == [
      {'transformer': 'api/transformer.md'},
      {'data/': [{'data': 'api/transformer/data.md'},
                 {'new_source': 'api/transformer/data/new_source.md'}]},
      {'train': 'api/transformer/train.md'}]


def test_the_package_has_a_page_per_module(api_pages):
  names = api_pages.modules()
  assert {'transformer', 'transformer.attention.kernels',
          'transformer.tools.architecture'} <= set(names)
  assert not [name for name in names if '._' in name]


def test_grouped_args_are_split_one_per_name(grouped_args):
  docstring = '\n'.join([
      'Does it.', '', 'Args:', '  init: a function.',
      '  mesh, rules: where the axes go,', '    all of them.', '',
      '  *args, **kwargs: the rest.', '', 'Returns:',
      '  a, b: not parameters.'])
  assert grouped_args.split_grouped(docstring).splitlines() == [
      'Does it.', '', 'Args:', '  init: a function.',
      '  mesh: where the axes go,', '    all of them.',
      '  rules: where the axes go,', '    all of them.', '',
      '  *args: the rest.', '  **kwargs: the rest.', '', 'Returns:',
      '  a, b: not parameters.']
