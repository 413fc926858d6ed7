"""One check for numbers out of range, for config fields and command flags
alike: the message names the field (or flag), the value and the range."""

from __future__ import annotations

import math


def check(label: str, value: float, *, low: float | None = None,
          high: float | None = None, low_in: bool = True,
          high_in: bool = False, why: str = '') -> None:
  """Refuses `value` outside the interval from `low` to `high` (each bound
  included when `low_in`/`high_in`; None for none), NaN and infinity.

  Raises:
    ValueError: '{label}={value} must be >= 1.', '... must be in [0, 1).',
      with ' (a finite number)' for NaN or infinity and `why` after it.
  """
  inside = (low is None or (value >= low if low_in else value > low)) and (
      high is None or (value <= high if high_in else value < high))
  if inside and math.isfinite(value):
    return
  finite = '' if math.isfinite(value) else ' (a finite number)'
  raise ValueError(f'{label}={value} must be '
                   f'{describe(low, high, low_in, high_in)}{finite}{why}.')


def describe(low: float | None, high: float | None, low_in: bool = True,
             high_in: bool = False) -> str:
  """'>= 1', '> 0', '<= 5', 'in [0, 1)': an interval in words."""
  if high is None:
    return f'>= {low}' if low_in else f'> {low}'
  if low is None:
    return f'<= {high}' if high_in else f'< {high}'
  return (f'in {"[" if low_in else "("}{low}, {high}'
          f'{"]" if high_in else ")"}')
