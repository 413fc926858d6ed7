"""Collectives of a compiled program, read from its HLO text.

Each collective's bytes are its operands' (the shapes are a device's
shards), times the times it runs: once in the entry computation, a loop's
trip count inside a loop's body (XLA's `known_trip_count` where it prints
one, else the one bound the loop's condition compares with, as scanned
layers compile; a loop where neither says is counted once, and said so). From the bytes, what one chip sends over
its links, for the ring algorithms XLA uses: an all-gather or
reduce-scatter over n chips moves (n - 1) / n of the gathered array, an
all-reduce twice that, an all-to-all (n - 1) / n of its operand, a
permute its operand.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re

# Bytes per element of HLO's element types.
_ITEM_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 's16': 2, 'u16': 2, 'f16': 2,
               'bf16': 2, 's32': 4, 'u32': 4, 'f32': 4, 's64': 8, 'u64': 8,
               'f64': 8, 'c64': 8, 'c128': 16, 's4': 0.5, 'u4': 0.5}
_ARRAY = re.compile(r'\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]')
_COMPUTATION = re.compile(r'^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$')
_INSTRUCTION = re.compile(
    r'^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([a-z][\w\-]*)\((.*?)\)(.*)$')
KINDS = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
         'collective-permute')


def _bytes(shape_text: str) -> float:
  """Bytes of every array in a shape (a tuple's elements summed)."""
  total = 0.0
  for dtype, dims in _ARRAY.findall(shape_text):
    size = _ITEM_BYTES.get(dtype, 1 if dtype.startswith('f8') else 0)
    total += size * math.prod(int(d) for d in dims.split(',') if d)
  return total


def _group_size(attributes: str, devices: int) -> int:
  """Chips in each group of a collective's replica_groups: explicit
  {{0,1,..}}, iota [groups,size]<=[..], or mesh[...] {'axes'}."""
  explicit = re.search(r'replica_groups=\{\{([\d,]*)\}', attributes)
  if explicit:
    return len(explicit.group(1).split(','))
  iota = re.search(r'replica_groups=\[(\d+),(\d+)\]', attributes)
  if iota:
    return int(iota.group(2))
  # mesh[...] then, with a device order, device_ids=([4,4]T(1,0)), before
  # the axes the groups span.
  mesh = re.search(r"replica_groups=mesh\[([^\]]*)\][^{]*\{([^}]*)\}",
                   attributes)
  if mesh:
    sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
    return math.prod(int(sizes[a]) for a in re.findall(r"'(\w+)'",
                                                         mesh.group(2)))
  return devices  # no groups: every device


@dataclasses.dataclass
class Collectives:
  """Per kind: how many run a step, their operands' bytes per chip, and
  the bytes a chip sends for them (module docstring)."""
  count: dict[str, int]
  operand_bytes: dict[str, float]
  link_bytes: dict[str, float]
  unknown_loops: int = 0  # loops whose trip count no line says: once

  @property
  def total_link_bytes(self) -> float:
    return sum(self.link_bytes.values())


def _computations(text: str) -> dict[str, list[str]]:
  """Computation name -> its instruction lines; the entry is 'ENTRY'."""
  computations, name = {}, None
  for line in text.splitlines():
    header = _COMPUTATION.match(line)
    if header:
      name = 'ENTRY' if line.startswith('ENTRY') else header.group(1)
      computations[name] = []
    elif name is not None and line.strip() == '}':
      name = None
    elif name is not None:
      computations[name].append(line)
  return computations


def _trip_count(line: str, condition: list[str]) -> int | None:
  """A loop's trip count: XLA's `known_trip_count` where it prints one,
  else the one bound its condition compares its counter with (scans count
  0, 1, ... below it); None where neither says."""
  known = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
  if known:
    return int(known.group(1))
  bounds = {int(n) for text in condition
            for n in re.findall(r'constant\((\d+)\)', text)}
  return bounds.pop() if len(bounds) == 1 else None


def _calls(line: str, computations: dict[str, list[str]]
           ) -> list[tuple[str, int | None]]:
  """(callee, times or None for an unknown loop) of one instruction."""
  body = re.search(r'body=%?([\w.\-]+)', line)
  condition = re.search(r'condition=%?([\w.\-]+)', line)
  if body and condition:
    return [(body.group(1), _trip_count(
        line, computations.get(condition.group(1), [])))]
  names = re.findall(r'(?:to_apply|calls|true_computation|'
                     r'false_computation)=%?([\w.\-]+)', line)
  for group in re.findall(r'(?:branch_computations|called_computations)='
                          r'\{([^}]*)\}', line):
    names += re.findall(r'%?([\w.\-]+)', group)
  return [(name, 1) for name in names if name in computations]


def _multiplicities(computations: dict[str, list[str]]
                    ) -> tuple[dict[str, float], int]:
  """How many times each computation runs per execution of the entry, and
  how many loops had no readable trip count (counted once)."""
  edges = collections.defaultdict(list)
  callers = collections.Counter()
  unknown, seen, pending = 0, {'ENTRY'}, ['ENTRY']
  while pending:  # the computations reachable from the entry
    name = pending.pop()
    for line in computations.get(name, ()):
      for callee, times in _calls(line, computations):
        if callee == name:
          continue
        unknown += times is None
        edges[name].append((callee, 1 if times is None else times))
        callers[callee] += 1
        if callee not in seen:
          seen.add(callee)
          pending.append(callee)
  # Callers before callees (the call graph has no cycles): each
  # computation's count is final before it passes it on.
  runs = collections.defaultdict(float, {'ENTRY': 1.0})
  ready = ['ENTRY']
  while ready:
    name = ready.pop()
    for callee, times in edges[name]:
      runs[callee] += runs[name] * times
      callers[callee] -= 1
      if not callers[callee]:
        ready.append(callee)
  return runs, unknown


def collectives(text: str, devices: int) -> Collectives:
  """The collectives of a compiled program's HLO text (`as_text()`), per
  chip, `devices` being how many the program spans."""
  computations = _computations(text)
  runs, unknown = _multiplicities(computations)
  count = collections.Counter()
  operands = collections.defaultdict(float)
  sent = collections.defaultdict(float)
  for name, lines in computations.items():
    if not runs.get(name):
      continue
    shapes = {}
    for line in lines:
      match = _INSTRUCTION.match(line)
      if not match:
        continue
      result, shape, opcode, args, attributes = match.groups()
      shapes[result] = _bytes(shape)
      kind = opcode.removesuffix('-start')
      if kind not in KINDS:
        continue
      # Long operand lists carry /*index=5*/ comments: take the names.
      size = sum(shapes.get(arg, 0.0)
                 for arg in re.findall(r'%([\w.\-]+)', args))
      n = _group_size(attributes, devices)
      if kind == 'all-gather':  # what a chip ends with: n x its operand
        size_moved = size * (n - 1)
      elif kind == 'all-reduce':
        size_moved = 2 * size * (n - 1) / n
      elif kind == 'collective-permute':
        size_moved = size
      else:  # reduce-scatter, all-to-all
        size_moved = size * (n - 1) / n
      times = runs[name]
      count[kind] += times
      operands[kind] += size * times
      sent[kind] += size_moved * times
  return Collectives(dict(count), dict(operands), dict(sent), unknown)
