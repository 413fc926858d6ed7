"""The argument string of experiment files: `--config=file.py:a=1,b=x,flag`."""

from __future__ import annotations

from typing import Sequence


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
