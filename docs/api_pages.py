"""A mkdocs hook: the API reference, one page per module of the package.

Each page is one mkdocstrings directive (`::: transformer.x.y`), made at
build time from the tree, so a new module appears in the site and in its
navigation without editing a page. mkdocstrings reads the docstrings with
griffe, from the source: nothing of the package is imported.
"""

import os

from mkdocs.structure import files as mkdocs_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'transformer'
# The nav section the module pages are added to (mkdocs.yml).
SECTION = 'API reference'


def modules(repo: str = REPO) -> list[str]:
  """The dotted names of the package's public modules, sorted: every .py
  file but those whose name starts with '_' (a package is its
  __init__.py)."""
  found = []
  for folder, folders, names in os.walk(os.path.join(repo, PACKAGE)):
    folders[:] = sorted(name for name in folders
                        if not name.startswith(('_', '.')))
    if '__init__.py' not in names:
      folders[:] = []
      continue
    dotted = os.path.relpath(folder, repo).replace(os.sep, '.')
    found.append(dotted)
    found += [f'{dotted}.{name[:-3]}' for name in names
              if name.endswith('.py') and not name.startswith('_')]
  return sorted(found)


def page(module: str) -> str:
  """The page of a module, relative to the docs folder."""
  return f'api/{module.replace(".", "/")}.md'


def nav(names: list[str]) -> list:
  """The section's entries: the package, then one per room (a top-level
  module, or a package with its modules under it), alphabetical; each
  labelled by its name inside the package."""
  rooms: dict[str, list[str]] = {}
  for name in names:
    parts = name.split('.')
    if len(parts) > 1:
      rooms.setdefault(parts[1], []).append(name)
  entries = [{PACKAGE: page(PACKAGE)}]
  for room, members in sorted(rooms.items()):
    if len(members) == 1:
      entries.append({room: page(members[0])})
    else:
      prefix = f'{PACKAGE}.{room}.'
      entries.append({f'{room}/': [
          {name.removeprefix(prefix) if name != prefix[:-1] else room:
           page(name)} for name in members]})
  return entries


def on_config(config):
  """Appends the module pages to the API reference section of the nav
  (once: `mkdocs serve` may build again with the same config)."""
  for entry in config.nav or []:
    if isinstance(entry, dict) and SECTION in entry:
      generated = nav(modules())
      entry[SECTION] = [page_entry for page_entry in entry[SECTION]
                        if page_entry not in generated] + generated
      return config
  raise ValueError(f'mkdocs.yml: the nav has no {SECTION!r} section for '
                   f'the module pages')


def on_files(files, config):
  """Adds a generated page for every module."""
  for module in modules():
    files.append(mkdocs_files.File.generated(
        config, page(module), content=f'# `{module}`\n\n::: {module}\n'))
  return files
