"""The organization docs/architecture.md describes is the code's: every
room (a top-level module or folder of the package) on one floor of the
page's floors block, every import between rooms going down, the module
index of the API reference (docs/api/index.md) the one
`transformer.tools.architecture` writes from the tree, and the tests'
folders named after the rooms they test. Reads the source only (ast);
one test runs the layout command."""

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, 'transformer')
PAGE = os.path.join(REPO, 'docs', 'architecture.md')
# The page that holds the layout block (the module index).
API_PAGE = os.path.join(REPO, 'docs', 'api', 'index.md')


def floors() -> dict[str, int]:
  """{room: floor} from the page's lines 'floor N  a, b, ...'."""
  found = {}
  with open(PAGE, encoding='utf-8') as f:
    for line in f:
      match = re.fullmatch(r'floor (\d+)\s+(.+)', line.strip())
      if match:
        for room in match.group(2).split(','):
          assert room.strip() not in found, f'{room} on two floors'
          found[room.strip()] = int(match.group(1))
  assert found, f'no floors in {PAGE}'
  return found


def modules() -> dict[str, str]:
  """{dotted module name: path} of every module of the package."""
  found = {}
  for folder, _, names in os.walk(PACKAGE):
    for name in names:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path[:-3], REPO).replace(os.sep, '.')
        found[dotted.removesuffix('.__init__')] = path
  return found


def sources(skip: str = '') -> dict[str, str]:
  """{path relative to the repository: source} of every module of the
  package but `skip` (a path relative to the package)."""
  found = {}
  for path in modules().values():
    if path != os.path.join(PACKAGE, skip):
      with open(path, encoding='utf-8') as f:
        found[os.path.relpath(path, REPO)] = f.read()
  return found


def room(dotted: str) -> str | None:
  """The room of `transformer.X...`: X; None for the package itself."""
  parts = dotted.split('.')
  return parts[1] if len(parts) > 1 else None


def imports(path: str) -> set[str]:
  """The transformer modules a file imports (functions' imports too)."""
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.add(node.module)
      found |= {f'{node.module}.{a.name}' for a in node.names}
  return {name for name in found if name.startswith('transformer.')}


def test_every_room_is_on_one_floor_and_every_floor_names_a_room():
  on_floors = floors()
  rooms = {room(name) for name in modules()} - {None}
  assert rooms - set(on_floors) == set(), 'rooms on no floor'
  assert set(on_floors) - rooms == set(), 'floors name rooms not in the tree'


def test_imports_between_rooms_only_go_down():
  on_floors, known = floors(), modules()
  wrong = []
  for dotted, path in known.items():
    here = room(dotted)
    if here is None:
      continue
    for target in imports(path):
      there = room(target)
      # `from transformer.x import name` also names transformer.x.name.
      if there is None or there == here or (
          target not in known and target.rsplit('.', 1)[0] not in known):
        continue
      if on_floors[there] >= on_floors[here]:
        way = 'sideways' if on_floors[there] == on_floors[here] else 'up'
        wrong.append(f'{dotted} (floor {on_floors[here]}) imports {target} '
                     f'(floor {on_floors[there]}): {way}')
  assert not wrong, '\n'.join(sorted(set(wrong)))


def test_the_layout_on_the_page_is_the_trees():
  from transformer.tools import architecture  # pylint: disable=g-import-not-at-top
  with open(PAGE, encoding='utf-8') as f:
    floors_text = f.read()
  with open(API_PAGE, encoding='utf-8') as f:
    page = f.read()
  assert architecture.with_layout(page, floors_text=floors_text) == page, (
      'docs/api/index.md\'s layout differs from the tree: run python -m '
      'transformer.tools.architecture')


def test_the_layout_names_every_module_and_follows_a_new_one(tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  from transformer.tools import architecture  # pylint: disable=g-import-not-at-top
  with open(PAGE, encoding='utf-8') as f:
    page = f.read()
  block = architecture.layout(page)
  for folder, _, names in os.walk(PACKAGE):
    for name in names:
      if name.endswith(('.py', '.js', '.html')) and name != '__init__.py':
        assert re.search(rf'^ +{re.escape(name)}\b', block, re.M), name
  package = tmp_path / 'transformer'
  shutil.copytree(PACKAGE, package)
  (package / 'data' / 'new_source.py').write_text(
      '"""A new source of examples. More."""\n')
  with open(API_PAGE, encoding='utf-8') as f:
    api_page = f.read()
  moved = architecture.with_layout(api_page, str(package), page)
  assert moved != api_page
  assert 'new_source.py     A new source of examples.\n' in moved
  assert 'More.' not in moved


def test_a_module_that_does_not_parse_is_one_line_naming_it(tmp_path,
                                                            capsys):
  """A syntax error, a byte that is not UTF-8, a null byte: the layout
  command's error names the file (and the line) and the fix, in one line,
  with no traceback."""
  import pytest  # pylint: disable=g-import-not-at-top
  from transformer.tools import architecture  # pylint: disable=g-import-not-at-top
  from transformer.tools import cli  # pylint: disable=g-import-not-at-top
  room = tmp_path / 'transformer' / 'core'
  room.mkdir(parents=True)
  (room / '__init__.py').write_text('"""The core."""\n')
  page = f'floor 1  core\n{architecture.BEGIN}\n{architecture.END}\n'
  for source, names in ((b'"""Fine."""\n\ndef f(:\n', ('line 3',)),
                        (b'"""A\nCaf\xe9."""\n', ('line 2', '0xe9')),
                        (b'"""Fine."""\nx = 1\x00\n', ('null',))):
    (room / 'broken.py').write_bytes(source)
    layout = cli.handle_errors(lambda unused_argv: architecture.with_layout(
        page, str(tmp_path / 'transformer')))
    with pytest.raises(SystemExit) as exited:
      layout([])
    err = capsys.readouterr().err
    assert exited.value.code == cli.USER_ERROR, err
    [line] = err.splitlines()
    assert line.startswith(f'Error: {room / "broken.py"}'), line
    assert 'run the command again' in line
    for name in names:
      assert name in line, line


# Test folders that are not a room: bad input to every command (trust),
# the documentation site and its recipes (docs).
CROSS_CUTTING = {'trust', 'docs'}


def test_test_folders_are_named_after_rooms():
  tests = os.path.join(REPO, 'tests')
  rooms = set(floors())
  folders = {name for name in os.listdir(tests)
             if os.path.isdir(os.path.join(tests, name))
             and any(f.startswith('test_') and f.endswith('.py')
                     for f in os.listdir(os.path.join(tests, name)))}
  assert folders, 'no test folders'
  assert folders - rooms - CROSS_CUTTING == set(), 'folders that are no room'
  loose = [name for name in os.listdir(tests)
           if name.startswith('test_') and name != 'test_architecture.py']
  assert not loose, f'tests outside a room folder: {loose}'


def test_the_first_line_of_an_error_has_one_home():
  """Refusals quote an error's first line through `errors.first_line`;
  a module that cuts one out itself again is named here."""
  cut = re.compile(r'splitlines\(\)\[0\]')
  found = [f'{path}:{i}' for path, source in sources('errors.py').items()
           for i, line in enumerate(source.splitlines(), 1)
           if cut.search(line)]
  assert not found, f'use errors.first_line at {found}'


def test_no_private_module_of_a_dependency_is_imported():
  """A dependency's `_src` (or other underscore) modules change without
  notice between its releases; the package uses public APIs only."""
  private = []
  for path, source in sources().items():
    for node in ast.walk(ast.parse(source)):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import)
               else [node.module or ''] if isinstance(node, ast.ImportFrom)
               and not node.level else [])
      private += [f'{path}:{node.lineno} {m}'
                  for m in names if m.split('.')[0] != 'transformer'
                  and any(p.startswith('_') for p in m.split('.')[1:])]
  assert not private, f'private modules imported: {private}'


def test_the_jax_stack_has_tested_ranges_and_ci_pins_inside_them():
  """setup.py bounds jax, flax, optax and orbax on both sides, and the
  versions CI installs (constraints.txt) lie within those bounds."""
  from packaging import requirements  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, 'setup.py'), encoding='utf-8') as f:
    setup = f.read()
  with open(os.path.join(REPO, 'constraints.txt'), encoding='utf-8') as f:
    pinned = dict(line.strip().split('==') for line in f
                  if '==' in line and not line.startswith('#'))
  for name in ('jax', 'flax', 'optax', 'orbax-checkpoint'):
    found = re.search(rf"'({re.escape(name)}[<>=][^']*)'", setup)
    assert found, f'{name} is not in install_requires'
    spec = requirements.Requirement(found.group(1)).specifier
    assert {s.operator for s in spec} >= {'>=', '<'}, f'{name}: {spec}'
    assert pinned[name] in spec, f'{name}=={pinned[name]} outside {spec}'


# What reaches files with local-only semantics: a workdir path handed to
# one of these (outside storage.py) would break on gs://.
_LOCAL_FILES = {'os': {'makedirs', 'mkdir', 'listdir', 'remove', 'replace',
                       'rename', 'scandir', 'walk', 'stat', 'unlink',
                       'rmdir'},
                'shutil': None}  # None: every function


def _local_file_call(call: ast.Call) -> bool:
  function = call.func
  if isinstance(function, ast.Name):
    return function.id == 'open'
  if not isinstance(function, ast.Attribute):
    return False
  owner = function.value
  if (isinstance(owner, ast.Attribute) and owner.attr == 'path'
      and isinstance(owner.value, ast.Name) and owner.value.id == 'os'):
    return True
  if isinstance(owner, ast.Name) and owner.id in _LOCAL_FILES:
    names = _LOCAL_FILES[owner.id]
    return names is None or function.attr in names
  return False


def _workdir_names(node: ast.AST) -> list[str]:
  """The workdir variables `node` uses, outside calls into storage (which
  may hand back a local mirror) and constants (fixed local paths)."""
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
      and isinstance(node.func.value, ast.Name)
      and node.func.value.id == 'storage'):
    return []
  name = (node.id if isinstance(node, ast.Name) else
          node.attr if isinstance(node, ast.Attribute) else '')
  if 'workdir' in name.lower() and not name.isupper():
    return [name]
  return [found for child in ast.iter_child_nodes(node)
          for found in _workdir_names(child)]


def local_file_calls_on_workdirs(source: str) -> list[str]:
  return [f'{call.lineno}: {ast.unparse(call)}'
          for call in ast.walk(ast.parse(source))
          if isinstance(call, ast.Call) and _local_file_call(call)
          and any(_workdir_names(arg) for arg in call.args)]


def test_workdir_paths_reach_files_only_through_storage():
  """A workdir can be a bucket (gs://): `os.path`, `open()`, `os`'s file
  functions and `shutil` see only local files, so a workdir path reaches
  them only through storage (`storage.path`, an `etils.epath.Path`)."""
  found = [f'{path}:{call}' for path, source in sources('storage.py').items()
           for call in local_file_calls_on_workdirs(source)]
  assert not found, '\n'.join(found)


def test_the_workdir_path_check_can_fail():
  assert sorted(local_file_calls_on_workdirs(
      'open(os.path.join(args.workdir, "a"))\nos.makedirs(workdir)\n'
      'shutil.copy(x, self.workdir)')) == [
          "1: open(os.path.join(args.workdir, 'a'))",
          "1: os.path.join(args.workdir, 'a')", '2: os.makedirs(workdir)',
          '3: shutil.copy(x, self.workdir)']
  assert not local_file_calls_on_workdirs(
      'storage.path(workdir) / "a"\nos.path.abspath(DEFAULT_WORKDIR)\n'
      'os.path.abspath(storage.local_mirror(workdir))')
