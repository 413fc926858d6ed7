"""Argument strings: of experiment files (`--config=file.py:a=1,b=x,flag`)
and of config overrides (`model.remat=full,mesh.data=2`)."""

from __future__ import annotations

import ast
import functools
from typing import Sequence

import ml_collections


def parse(arg: str, *, name: str, known: Sequence[str],
          required: Sequence[str] = ()) -> dict[str, str]:
  """'path=DIR,src=de,runlocal' -> {'path': 'DIR', 'src': 'de',
  'runlocal': 'true'}.

  Args:
    arg: the text after ':' in --config.
    name: the experiment file, for messages.
    known: every accepted key (a misspelt key must not be ignored).
    required: keys that must be given.
  """
  args = dict((item.split('=', 1) + ['true'])[:2]
              for item in arg.split(',') if item)
  unknown = sorted(set(args) - set(known))
  if unknown:
    raise ValueError(f'{name}: unknown arguments {unknown}; known: '
                     f'{", ".join(known)}.')
  missing = [key for key in required if key not in args]
  if missing:
    raise ValueError(f'{name} needs {", ".join(missing)}, e.g. '
                     f'--config={name}:' + ','.join(f'{k}=...'
                                                    for k in required))
  return args


def override(config: ml_collections.ConfigDict, overrides: str
             ) -> ml_collections.ConfigDict:
  """A copy of `config` with 'a.b=value,c=value' applied (values as python
  literals, else strings), as --config.a.b=value flags would; '' or 'base'
  changes nothing. Unknown fields are refused, as on the command line."""
  config = config.copy_and_resolve_references()
  for assignment in filter(None, overrides.split(',')):
    if assignment == 'base':
      continue
    field, value = assignment.split('=', 1)
    *parents, name = field.strip().split('.')
    node = functools.reduce(lambda c, key: c[key], parents, config)
    if name not in node:
      raise KeyError(f'Unknown config field {field!r} in {overrides!r}.')
    try:
      node[name] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      node[name] = value  # a plain string
  return config
