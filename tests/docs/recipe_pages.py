"""Running a recipe page of docs/recipes/ as a reader would follow it.

A page's python code blocks run in order. The first line of a block says
what it is:

  # transformer/x/y.py      a new module of the package: it runs as the
                            module `transformer.x.y`, importable by the
                            blocks after it
  # in transformer/x/y.py   lines added to that module: they run in its
                            namespace, and the names they define are the
                            module's while the test runs (decorators such
                            as `@register` reach the real registries)
  # NAME.py                 a file of the reader's: written into the
                            working directory
  anything else             a script; the scripts share one namespace

`diff` blocks are edits of existing files (`apply_diff`). Every change to
`sys.modules` and to the package's modules is undone with `monkeypatch`,
and the data-source registry is restored by `sources_restored`.
"""

import contextlib
import importlib
import os
import re
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RECIPES = os.path.join(REPO, 'docs', 'recipes')

_FENCE = re.compile(r'^```(\w*)\n(.*?)^```\s*$', re.M | re.S)
_NEW_MODULE = re.compile(r'# (transformer/[\w/]+)\.py')
_IN_MODULE = re.compile(r'# in (transformer/[\w/]+)\.py\b.*')
_USER_FILE = re.compile(r'# (\w+\.py)')


def code_blocks(page: str, language: str) -> list[str]:
  """The code of the page's fenced blocks of `language`, in order."""
  with open(os.path.join(RECIPES, page), encoding='utf-8') as f:
    text = f.read()
  return [code for lang, code in _FENCE.findall(text) if lang == language]


def load_module(name: str, code: str, monkeypatch, where: str):
  """`code` run as the module `name` (e.g. 'transformer.models.mixer'),
  registered in sys.modules and on its package while the test runs."""
  module = types.ModuleType(name)
  module.__file__ = where
  monkeypatch.setitem(sys.modules, name, module)
  package, _, leaf = name.rpartition('.')
  monkeypatch.setattr(importlib.import_module(package), leaf, module,
                      raising=False)
  exec(compile(code, where, 'exec'), module.__dict__)  # pylint: disable=exec-used
  return module


def run(page: str, monkeypatch, workdir) -> dict:
  """Runs the page's python blocks (see the module docstring) with
  `workdir` as the working directory; the scripts' namespace."""
  monkeypatch.chdir(workdir)
  namespace = {'__name__': f'recipe_{page[:-3]}'}
  for number, code in enumerate(code_blocks(page, 'python'), 1):
    first = code.splitlines()[0].strip()
    where = f'docs/recipes/{page}, python block {number}'
    if _NEW_MODULE.fullmatch(first):
      dotted = _NEW_MODULE.fullmatch(first).group(1).replace('/', '.')
      load_module(dotted, code, monkeypatch, where)
    elif _IN_MODULE.fullmatch(first):
      dotted = _IN_MODULE.fullmatch(first).group(1).replace('/', '.')
      module = importlib.import_module(dotted)
      scope = dict(vars(module))
      exec(compile(code, where, 'exec'), scope)  # pylint: disable=exec-used
      for name, value in scope.items():
        if name != '__builtins__' and value is not vars(module).get(name):
          monkeypatch.setattr(module, name, value, raising=False)
    elif _USER_FILE.fullmatch(first):
      with open(_USER_FILE.fullmatch(first).group(1), 'w',
                encoding='utf-8') as f:
        f.write(code)
    else:
      exec(compile(code, where, 'exec'), namespace)  # pylint: disable=exec-used
  return namespace


def apply_diff(source: str, diff: str) -> str:
  """`source` with a unified diff's hunks applied: each hunk's old lines
  (context and '-') must occur exactly once, and become its new lines
  (context and '+'). Line numbers in '@@' lines are not read."""
  hunks, hunk = [], []
  for line in diff.splitlines():
    if line.startswith(('---', '+++')):
      continue
    if line.startswith('@@'):
      hunks.append(hunk)
      hunk = []
    else:
      hunk.append(line)
  hunks.append(hunk)
  for lines in filter(None, hunks):
    old = '\n'.join(line[1:] for line in lines if line[:1] in (' ', '-', ''))
    new = '\n'.join(line[1:] for line in lines if line[:1] in (' ', '+', ''))
    count = source.count(old)
    assert count == 1, f'the diff\'s lines are {count} times in the file:\n{old}'
    source = source.replace(old, new)
  return source


@contextlib.contextmanager
def sources_restored():
  """The data-source registry as it was, after the block."""
  from transformer.data import sources  # pylint: disable=g-import-not-at-top
  readers = {kind: dict(found) for kind, found in sources.READERS.items()}
  fields = {kind: dict(found) for kind, found in sources.FIELDS.items()}
  try:
    yield
  finally:
    for kind in sources.KINDS:
      sources.READERS[kind].clear()
      sources.READERS[kind].update(readers[kind])
      sources.FIELDS[kind].clear()
      sources.FIELDS[kind].update(fields[kind])
