"""The API reference's module index (docs/api/index.md), written from the
tree: every room of a floor and every module in it, each with the first
sentence of its docstring.

    python -m transformer.tools.architecture [--page=docs/api/index.md]
        [--floors=docs/architecture.md] [--check]

Rewrites the page's block between the two `layout` markers, floor by
floor as the floors block of docs/architecture.md has them; `--check`
changes nothing and exits 1 when the block differs from the tree, as
tests/test_architecture.py does. Reads the source only: nothing is
imported or run.
"""

import ast
import os
import re
import sys
import textwrap

from absl import flags

from transformer import storage
from transformer.tools import cli

BEGIN = '<!-- layout: written by python -m transformer.tools.architecture -->'
END = '<!-- end of layout -->'
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Columns: a name, then its description from this column on.
NAME_WIDTH = 24
WIDTH = 79

DOCS = os.path.join(os.path.dirname(PACKAGE), 'docs')

_PAGE = flags.DEFINE_string(
    'page', os.path.join(DOCS, 'api', 'index.md'),
    'The page whose layout block is written.')
_FLOORS = flags.DEFINE_string(
    'floors', os.path.join(DOCS, 'architecture.md'),
    'The page whose floors block (lines "floor N  a, b") orders the rooms.')
_CHECK = flags.DEFINE_bool(
    'check', False, 'Change nothing; exit 1 when the page differs from the '
    'tree.')


def floors(page_text: str) -> list[tuple[int, list[str]]]:
  """[(floor, [room, ...]), ...] from the page's 'floor N  a, b' lines,
  top floor first as the page lists them."""
  found = []
  for line in page_text.splitlines():
    match = re.fullmatch(r'floor (\d+)\s+(.+)', line.strip())
    if match:
      found.append((int(match.group(1)),
                    [room.strip() for room in match.group(2).split(',')]))
  if not found:
    raise ValueError('the page has no floors block (lines "floor N  a, b")')
  return found


def first_sentence(path: str) -> str:
  """The first sentence of a Python module's docstring, or of the leading
  comment of a .js file; the first line of an HTML file's <title>."""
  text = _source(path)
  if path.endswith('.py'):
    doc = ast.get_docstring(_parsed(path, text)) or ''
  elif path.endswith('.js'):
    doc = ' '.join(line.removeprefix('//').strip()
                   for line in text.splitlines() if line.startswith('//'))
  else:
    match = re.search(r'<title>(.*?)</title>', text, re.S)
    doc = f'{match.group(1).strip()}: the page.' if match else ''
  paragraph = ' '.join(doc.strip().split('\n\n')[0].split())
  # A sentence ends at '. ' but not after "et al" or "e.g".
  match = re.search(r'(?<!\bal)(?<!e\.g)(?<!i\.e)\.(\s|$)', paragraph)
  return paragraph[:match.start() + 1] if match else paragraph


def _source(path: str) -> str:
  with open(path, 'rb') as f:
    raw = f.read()
  try:
    return storage.decode_utf8(raw)
  except storage.NotUtf8 as e:
    raise ValueError(f'{path}, line {e.line}: byte {e.byte:#04x} is not '
                     f'UTF-8; save the file as UTF-8 and run the command '
                     f'again.') from None


def _parsed(path: str, text: str) -> ast.Module:
  """The module's syntax tree; one that does not parse is named with its
  line (the layout needs every module's docstring, so none is skipped)."""
  try:
    return ast.parse(text, filename=path)
  except (SyntaxError, ValueError) as e:  # ValueError: a null byte
    line = getattr(e, 'lineno', None)
    where = f'{path}, line {line}' if line else path
    raise ValueError(f'{where}: {getattr(e, "msg", e)}; the module does not '
                     f'parse: fix it (python -m py_compile {path} shows '
                     f'where) and run the command again.') from e


def _line(name: str, description: str, indent: int) -> list[str]:
  head = ' ' * indent + name
  wrapped = textwrap.wrap(description, WIDTH - NAME_WIDTH) or ['']
  if len(head) >= NAME_WIDTH - 1:
    lines = [head]
  else:
    lines = [head.ljust(NAME_WIDTH) + wrapped.pop(0)]
  return lines + [' ' * NAME_WIDTH + rest for rest in wrapped]


def _module_files(folder: str) -> list[str]:
  return sorted(name for name in os.listdir(folder)
                if name.endswith(('.py', '.js', '.html'))
                and name != '__init__.py')


def _folder_lines(folder: str, indent: int) -> list[str]:
  """A folder's modules, then its subpackages' (e.g. experiments/paper/)."""
  lines = []
  for name in _module_files(folder):
    lines += _line(name, first_sentence(os.path.join(folder, name)), indent)
  for name in sorted(os.listdir(folder)):
    init = os.path.join(folder, name, '__init__.py')
    if os.path.isfile(init):
      lines += _line(f'{name}/', first_sentence(init), indent)
      lines += _folder_lines(os.path.join(folder, name), indent + 2)
  return lines


def layout(page_text: str, package: str = PACKAGE) -> str:
  """The layout block: the package's rooms floor by floor, top first;
  a folder's modules under it."""
  lines = ['transformer/']
  for floor, rooms in floors(page_text):
    lines.append(f'  floor {floor}')
    for room in rooms:
      folder = os.path.join(package, room)
      if os.path.isdir(folder):
        lines += _line(f'{room}/', first_sentence(
            os.path.join(folder, '__init__.py')), 4)
        lines += _folder_lines(folder, 6)
      elif os.path.exists(folder + '.py'):
        lines += _line(f'{room}.py', first_sentence(folder + '.py'), 4)
      else:
        raise ValueError(f'floor {floor} names {room!r}: no {room}.py or '
                         f'{room}/ in {package}')
  return '\n'.join(lines)


def with_layout(page_text: str, package: str = PACKAGE,
                floors_text: str | None = None) -> str:
  """The page with its block between the markers written from the tree,
  its rooms ordered by the floors block of `floors_text` (the page's own
  where None)."""
  if BEGIN not in page_text or END not in page_text:
    raise ValueError(f'the page has no layout markers; put the lines\n'
                     f'{BEGIN}\n{END}\nwhere the layout goes')
  before, rest = page_text.split(BEGIN, 1)
  after = rest.split(END, 1)[1]
  block = layout(page_text if floors_text is None else floors_text, package)
  return f'{before}{BEGIN}\n```\n{block}\n```\n{END}{after}'


def main(argv):
  cli.no_arguments(argv)
  cli.check_input_file('page', _PAGE.value, 'page')
  cli.check_input_file('floors', _FLOORS.value, 'page')
  with open(_PAGE.value, encoding='utf-8') as f:
    page_text = f.read()
  with open(_FLOORS.value, encoding='utf-8') as f:
    floors_text = f.read()
  written = with_layout(page_text, floors_text=floors_text)
  if written == page_text:
    print(f'{_PAGE.value}: the layout matches the tree.')
  elif _CHECK.value:
    print(f'{_PAGE.value}: the layout differs from the tree; run python -m '
          f'transformer.tools.architecture to write it.', file=sys.stderr)
    sys.exit(1)
  else:
    with open(_PAGE.value, 'w', encoding='utf-8') as f:
      f.write(written)
    print(f'Written: the layout of {_PAGE.value}')


def run() -> None:
  cli.run(main)


if __name__ == '__main__':
  run()
