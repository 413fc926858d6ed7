"""A griffe extension for the API reference: an `Args:` entry that names
several parameters at once (`mesh, rules: where the logical axes go.`),
a style this codebase uses, becomes one entry per name with the shared
description.

griffe's Google parser reads such an entry as one parameter named
'mesh, rules', which no signature has, and warns; split, each name is
still checked against the signature, so a misspelt one still fails the
strict build.
"""

import re

import griffe

_SECTION = re.compile(r'(\s*)(Args|Arguments|Parameters):\s*$')
_GROUPED = re.compile(r'(\s*)(\*{0,2}\w+(?:,\s*\*{0,2}\w+)+):(.*)')


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def split_grouped(text: str) -> str:
  """`text` (a docstring) with each grouped entry of its Args sections
  written once per name."""
  lines, out, i = text.splitlines(), [], 0
  section = None  # the indentation of the Args header we are under
  while i < len(lines):
    line = lines[i]
    if line.strip() and section is not None and _indent(line) <= section:
      section = None
    header = _SECTION.fullmatch(line)
    if header:
      section = len(header.group(1))
    grouped = _GROUPED.fullmatch(line) if section is not None else None
    if not grouped or _indent(line) <= section:
      out.append(line)
      i += 1
      continue
    indent, names, first = grouped.groups()
    rest = []  # the entry's continuation lines: deeper than its name
    i += 1
    while i < len(lines) and (not lines[i].strip()
                              and i + 1 < len(lines)
                              and _indent(lines[i + 1]) > len(indent)
                              or lines[i].strip()
                              and _indent(lines[i]) > len(indent)):
      rest.append(lines[i])
      i += 1
    for name in re.split(r',\s*', names):
      out += [f'{indent}{name}:{first}', *rest]
  return '\n'.join(out)


class GroupedArgs(griffe.Extension):
  """Splits grouped Args entries of functions' and classes' docstrings."""

  def on_instance(self, *, obj, **kwargs) -> None:
    del kwargs
    if obj.docstring is not None and isinstance(
        obj, (griffe.Function, griffe.Class)):
      obj.docstring.value = split_grouped(obj.docstring.value)
