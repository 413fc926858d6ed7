"""Measured figures typed into a page instead of rendered from the results
registry (`tools.results`): tables and printed output that hold digits,
and figures in prose (a time, a speed, a size, a percentage, a metric's
value), outside the registry's blocks and its inline figures.

What is no measurement (a setting, a count from a config, a published
paper's figure) says so with `<!-- not measured: why -->`: on the line
above a table, or inside or right above the paragraph it covers.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

NOT_MEASURED = '<!-- not measured:'
# A figure in prose, rendered from the registry in place:
#   <!-- figure: mt_offline/BLEU -->98.93 to 99.95<!-- /figure -->
FIGURE = re.compile(r'<!-- figure: ([^\n>]+?) -->(.*?)<!-- /figure -->')
# Inline code, which shows markers without being one.
_CODE = re.compile(r'`[^`\n]*`')
_RULER = re.compile(r'^\s*-{20,}\s*$')
_NUMBER = r'\d(?:[\d,]*\d)?(?:\.\d+)?'
_NOT_VERSION = ''.join(rf'(?<!{name} )' for name in (
    'Python', 'jax', 'flax', 'optax', 'orbax', 'torch', 'transformers',
    'version', 'CUDA', 'cuDNN'))
# A number with a unit of measurement, a metric's name and its value, or
# a bare value that reads as measured.
MEASURED = re.compile(
    rf'(?<![\w.]){_NUMBER}\s?(?:ms|µs|s|min|h|seconds?|minutes?|hours?|%|'
    r'tok/s|tokens/s|tokens per second|steps/s|examples/s|images/s|'
    r'KB|MB|GB|TB|KiB|MiB|GiB|TiB|GB/s|TFLOP/s)(?![\w/])'
    r'|\b(?:BLEU|[Pp]erplexity|[Aa]ccuracy|MFU|loss|nats|bits per byte|'
    rf'exact match|F1|MCC)(?: of| at| is| was)?(?: about)? {_NUMBER}'
    rf'|(?<![\w.]){_NUMBER} (?:BLEU|nats|MFU)\b'
    rf'|(?<![\w.:]){_NUMBER}x(?![\w/])'  # a speed-up: 1.09x
    # A bare value that reads as measured (99.84, 0.889, 41.7), not a
    # setting (dropout 0.1) or a version (Python 3.11).
    rf'|{_NOT_VERSION}(?<![\w.,/])(?<![\w.]-)(?:\d+\.\d{{2,}}|[1-9]\d+\.\d)(?![\w.])')
# What is not prose: HTML comments, inline code, link targets.
_NOT_PROSE = re.compile(r'<!--.*?-->|`[^`\n]*`|\]\([^)\n]*\)', re.DOTALL)


def following(lines: list[str], start: int, keep) -> list[str]:
  """The lines from `start` on while `keep(line)` holds."""
  taken = []
  for line in lines[start:]:
    if not keep(line):
      break
    taken.append(line)
  return taken


def _outside_blocks(lines: Sequence[str],
                    generated: Sequence[tuple[str, str]]) -> list[bool]:
  """For each line: whether it is outside the registry's rendered blocks
  (`<!-- results: ... -->` and the `generated` markers' blocks)."""
  opening = {begin for begin, _ in generated}
  closing = {end for _, end in generated}
  outside, inside = [], False
  for line in lines:
    if line.startswith('<!-- results:') or line in opening:
      inside = True
    elif line.startswith('<!-- /results') or line in closing:
      inside = False
      outside.append(False)
      continue
    outside.append(not inside)
  return outside


def tables(text: str, generated: Sequence[tuple[str, str]] = ()
           ) -> list[int]:
  """Line numbers (from 1) of tables with figures that are outside the
  registry's markers and not declared `not measured`: Markdown tables and
  printed output (a fenced block with a ruler line) holding a digit."""
  lines = text.split('\n')
  outside = _outside_blocks(lines, generated)
  found, in_fence = [], False
  has_digit = lambda block: any(c.isdigit() for c in ''.join(block))
  for i, line in enumerate(lines):
    if not outside[i]:
      continue
    declared = lambda: any(NOT_MEASURED in above
                           for above in lines[max(0, i - 2):i])
    if line.startswith('```'):
      in_fence = not in_fence
      if in_fence:
        block = following(lines, i + 1, lambda l: not l.startswith('```'))
        if (any(map(_RULER.match, block)) and has_digit(block)
            and not declared()):
          found.append(i + 1)
    elif (not in_fence and line.startswith('|')
          and (i == 0 or not lines[i - 1].startswith('|'))):
      rows = following(lines, i, lambda l: l.startswith('|'))
      if has_digit(rows[2:]) and not declared():
        found.append(i + 1)
  return found


def _paragraphs(lines: list[str], outside: list[bool]
                ) -> list[tuple[int, list[str]]]:
  """(first line's index, lines) of each prose paragraph: consecutive
  lines outside code fences, tables and the registry's blocks."""
  found: list[tuple[int, list[str]]] = []
  in_fence, current = False, None
  for i, line in enumerate(lines):
    fence = line.lstrip().startswith('```')
    if fence:
      in_fence = not in_fence
    prose = (outside[i] and not in_fence and not fence and line.strip()
             and not line.lstrip().startswith('|'))
    if not prose:
      current = None
      continue
    if current is None:
      current = (i, [])
      found.append(current)
    current[1].append(line)
  return found


def prose(text: str, generated: Sequence[tuple[str, str]] = ()
          ) -> list[tuple[int, str]]:
  """(line number from 1, the figure) of each measured-looking figure in
  prose: outside the registry's blocks and inline figures, code, comments
  and link targets, in a paragraph not declared `not measured`."""
  lines = text.split('\n')
  found = []
  blank = lambda m: re.sub(r'[^\n]', ' ', m.group(0))
  for first, paragraph in _paragraphs(lines, _outside_blocks(lines,
                                                             generated)):
    if _declared(paragraph, lines, first):
      continue
    joined = '\n'.join(paragraph)
    bare = _NOT_PROSE.sub(blank, FIGURE.sub(blank, joined))
    for match in MEASURED.finditer(bare):
      found.append((first + 1 + joined.count('\n', 0, match.start()),
                    match.group(0)))
  return found


def _declared(paragraph: list[str], lines: list[str], first: int) -> bool:
  """Whether a paragraph says its figures are no measurement: a `not
  measured` comment inside it or on the line right above it."""
  above = lines[first - 1] if first else ''
  return any(NOT_MEASURED in line for line in [above, *paragraph])


def figures_opening_lines(text: str) -> list[int]:
  """Line numbers of lines that begin with an inline figure: Markdown
  (CommonMark, Python-Markdown) reads a line that begins with `<!--` as
  an HTML block, which ends the paragraph there or hides it."""
  return [i + 1 for i, line in enumerate(text.split('\n'))
          if line.lstrip().startswith('<!-- figure:')]


def figures(text: str) -> list[re.Match]:
  """The inline figures of a page (not those shown in inline code)."""
  code = [m.span() for m in _CODE.finditer(text)]
  return [m for m in FIGURE.finditer(text)
          if not any(a <= m.start() < b for a, b in code)]


def render_inline(text: str, value: Callable[[str], str]) -> str:
  """`text` with each inline figure's value written by `value(ref)`."""
  parts, end = [], 0
  for m in figures(text):
    parts += [text[end:m.start()],
              f'<!-- figure: {m.group(1)} -->{value(m.group(1))}'
              '<!-- /figure -->']
    end = m.end()
  return ''.join(parts) + text[end:]
