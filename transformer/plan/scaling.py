"""The scaling table (docs/scaling.md): models at the scale users launch,
each searched (`search.run`) on the slices they would rent, written into
its block of the page by `python -m transformer.tools.plan
--table=docs/scaling.md`.

Cloud names slices by chips for v5e and v6e (v5e-64: 64 chips, 8x8) and
by TensorCores for v4 and v5p (v4-32: 16 chips, 2x2x4; v5p-64: 32 chips,
2x4x4). Published measurements of the same model on the same chip stand
beside a row where one exists: a measured throughput above our bound
would mean the bound is wrong.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Large models at bfloat16 with their layers scanned, as MaxText runs them:
# XLA's TPU compiler then compiles one block, not every layer (Transformer
# big unscanned at float32 took 449 s for v4-8 on 2 cores).
_DECODER = {'model.dtype': 'bfloat16', 'model.scan_layers': True}
_VIT = {'model.dtype': 'bfloat16', 'model.scan_layers': True,
        'data.batch_size': 4096, 'data.eval_batch_size': 4096}


@dataclasses.dataclass(frozen=True)
class Published:
  tokens_per_second_per_chip: float  # or images, in the row's unit
  mfu: float | None
  source: str


@dataclasses.dataclass(frozen=True, eq=False)  # rows are themselves
class Row:
  label: str
  experiment: str  # experiments/NAME.py[:ARG]
  overrides: dict[str, Any]
  topologies: tuple[tuple[str, str], ...]  # (Cloud's name, topology)
  published: dict[str, Published] = dataclasses.field(default_factory=dict)


_MAXTEXT_TIERS = ('MaxText, docs/reference/models/tiering.md: Llama 3.1 8B, '
                  '256 v6e chips, bf16, sequence 8,192')

ROWS = (
    Row('Transformer big, WMT14 en-de, 25k tokens a side',
        'experiments/wmt14.py:ende_big',
        {'model.dtype': 'bfloat16', 'model.scan_layers': True},
        (('v4-8', 'v4:2x2x1'), ('v5e-16', 'v5e:4x4'))),
    Row('GPT-2 XL (1.56B), 1,024 tokens, 512 rows a step',
        'experiments/lm1b.py',
        {**_DECODER, 'model.size': 'gpt2-xl', 'data.vocab_size': 50_304,
         'data.max_length': 1024, 'data.tokens_per_batch': 524_288},
        (('v5e-64', 'v5e:8x8'), ('v5e-256', 'v5e:16x16'),
         ('v5p-64', 'v5p:2x4x4'))),
    Row('Llama-3-8B shape, 8,192 tokens, 1M tokens a step (a row a chip '
        'at least)',
        'experiments/lm1b.py',
        {**_DECODER, 'model.size': 'llama3-8b', 'data.vocab_size': 128_256,
         'data.max_length': 8192, 'data.tokens_per_batch': 1_048_576},
        (('v5e-64', 'v5e:8x8'), ('v5e-256', 'v5e:16x16'),
         ('v5p-64', 'v5p:2x4x4'), ('v6e-256', 'v6e:16x16')),
        {'v6e:16x16': Published(7_207, 0.4546, _MAXTEXT_TIERS)}),
    Row('ViT-L/16 at 224, batch 4,096', 'experiments/vit_imagenet.py:L/16',
        _VIT, (('v4-32', 'v4:2x2x4'), ('v5e-64', 'v5e:8x8'))),
    Row('ViT-H/14 at 224, batch 4,096', 'experiments/vit_imagenet.py:H/14',
        _VIT, (('v4-32', 'v4:2x2x4'), ('v5e-64', 'v5e:8x8'))),
    Row('ViLBERT (COCO captions pretraining), batch 256',
        'experiments/vilbert_coco.py', {},
        (('v5e-4', 'v5e:2x2'), ('v4-8', 'v4:2x2x1'))),
)


def record(row: Row, name: str, topology: str, tried: list[Any],
           flags: list[str], seconds: float) -> dict[str, Any]:
  """One row on one slice as the JSON record the table is rendered from:
  the search's winner (`search.winner`, the first of `tried`, with its
  `flags` that change the config), or, where nothing fits, the
  candidate that came closest."""
  compiled = [t for t in tried if t.plan is not None]
  found = {'label': row.label, 'name': name, 'topology': topology,
           'compiled': len(compiled), 'seconds': seconds}
  if not any(t.plan.fits for t in compiled):
    closest = min(compiled, key=lambda t: t.plan.memory.peak, default=None)
    if closest is not None:
      found['closest'] = {'flags': closest.flags,
                          'peak': closest.plan.memory.peak,
                          'capacity': closest.plan.memory.capacity}
    return found
  plan = tried[0].plan  # `search.run` ranks what fits first
  return {**found, 'flags': flags, 'peak': plan.memory.peak,
          'capacity': plan.memory.capacity,
          'bound': plan.roofline.bound, 'serial': plan.roofline.serial,
          'limit': plan.roofline.limit, 'mfu': plan.mfu_ceiling,
          'rate': plan.units_per_second_per_chip, 'unit': plan.unit}


def _ms(seconds: float) -> str:
  """Milliseconds with three significant figures at least."""
  ms = seconds * 1e3
  return f'{ms:,.0f}' if ms >= 100 else f'{ms:.3g}'


def _flags(flags: list[str]) -> str:
  return ' '.join(f'`{flag.removeprefix("--config.")}`' for flag in flags)


def _cell(row: Row, found: dict[str, Any]) -> list[str]:
  if 'bound' not in found:
    closest = found.get('closest')
    near = (f' (closest: {closest["peak"] / 2**30:,.1f} of '
            f'{closest["capacity"] / 2**30:,.0f} GiB with '
            f'{_flags(closest["flags"])})' if closest else '')
    return [f'no candidate fits{near}', '', '', '', '', '']
  memory = f'{found["peak"] / 2**30:,.1f} / {found["capacity"] / 2**30:,.0f}'
  published = row.published.get(found['topology'])
  beside = ''
  if published is not None:
    check = ('above it' if found['rate'] >
             published.tokens_per_second_per_chip
             else '**below it: the bound is wrong**')
    mfu = f', MFU {published.mfu:.1%}' if published.mfu else ''
    beside = (f'{published.tokens_per_second_per_chip:,.0f}{mfu} '
              f'(bound {check}; {published.source})')
  return [_flags(found['flags']) or 'as configured', memory,
          f'{_ms(found["bound"])} ({found["limit"]}; '
          f'{_ms(found["serial"])} if nothing overlapped)',
          f'{found["mfu"]:.1%}', f'{found["rate"]:,.0f} {found["unit"]}',
          beside]


# The table's block in its page: the command rewrites what lies between.
BEGIN = '<!-- The scaling table: written by transformer-plan --table. -->'
END = '<!-- End of the scaling table. -->'


def in_page(page: str, table: str) -> str:
  """`page` with its table block replaced by `table` (appended, with its
  markers, where the page has none)."""
  block = f'{BEGIN}\n{table.rstrip()}\n{END}'
  if BEGIN in page and END in page:
    head, rest = page.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]
  return page.rstrip() + '\n\n' + block + '\n'


def merged(old: list[dict[str, Any]], new: list[dict[str, Any]]
           ) -> list[dict[str, Any]]:
  """`old` records with those of `new` in place of the same row and slice,
  in the order of `ROWS`."""
  key = lambda found: (found['label'], found['topology'])
  found = {key(f): f for f in old}
  found.update({key(f): f for f in new})
  order = {(row.label, topology): i for i, (row, topology) in enumerate(
      (row, topology) for row in ROWS for _, topology in row.topologies)}
  return sorted((f for f in found.values() if key(f) in order),
                key=lambda f: order[key(f)])


def markdown(records: list[dict[str, Any]]) -> str:
  """The table of `records` (`record`), each with the 'command' and the
  'versions' that wrote it."""
  versions = sorted({f['versions'] for f in records})
  commands = ' and '.join(f'`{c}`' for c in sorted(
      {f['command'] for f in records}))
  lines = [
      '## Every experiment at scale, compiled for its TPU slice from a CPU',
      '',
      f'Written by {commands} ({"; ".join(versions)}); nothing here was '
      f'measured on a TPU. Each row is the experiment with the overrides '
      f'shown beside its name, searched on each slice '
      f'(`transformer-plan --search`: per mesh, remat, micro-batches and a '
      f'bfloat16 first moment until it fits), and its winner compiled by '
      f'XLA\'s TPU compiler (libtpu) for that slice\'s chips. The records '
      f'are in `docs/scaling.json`; `--rows=TEXT` searches again the rows '
      f'whose label holds TEXT.', '',
      'Columns: the winning flags (those that change the experiment\'s '
      'config); peak memory per chip against the chip\'s HBM (GiB); the '
      'lower bound on the step\'s time from the chip\'s datasheet (its '
      'compute, memory or interconnect term, whichever is largest: '
      '`transformer/plan/roofline.py`) and the three terms\' sum, as if '
      'nothing overlapped; the MFU and throughput per chip that bound '
      'allows, which no run can exceed; a published measurement of the '
      'same model on the same chip where one exists, which must lie below '
      'the bound; how many candidates the search compiled, in how long. '
      'Cloud names v4 and v5p slices by TensorCores (v4-32: 16 chips), '
      'v5e and v6e by chips.', '']
  for row in ROWS:
    found = [f for f in records if f['label'] == row.label]
    if not found:
      continue
    overrides = ', '.join(f'`{k}={v}`' for k, v in row.overrides.items())
    lines += [f'### {row.label}', '',
              f'`{row.experiment}`' + (f' with {overrides}' if overrides
                                       else ''), '',
              '| slice | winner | peak / HBM (GiB) | step bound (ms) | '
              'MFU at most | per chip at most | published, measured | '
              'search |', '|---|---|---|---|---|---|---|---|']
    for f in found:
      lines.append(f'| {f["name"]} (`{f["topology"]}`) | '
                   + ' | '.join(_cell(row, f)) + f' | {f["compiled"]} '
                   f'compiled, {f["seconds"] / 60:,.1f} min |')
    lines.append('')
  return '\n'.join(lines)
