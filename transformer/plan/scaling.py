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


@dataclasses.dataclass(frozen=True)
class Result:
  """One row on one slice: the search's winner, or why none."""
  row: Row
  name: str  # Cloud's: 'v5e-64'
  topology: str
  winner: Any  # search.Tried | None
  flags: tuple[str, ...]  # the winner's flags that change the config
  compiled: int  # candidates compiled
  seconds: float  # the search's wall time


def _cell(result: Result) -> list[str]:
  winner = result.winner
  if winner is None:
    return ['no candidate fits', '', '', '', '', '']
  plan = winner.plan
  flags = ' '.join(f'`{flag.removeprefix("--config.")}`'
                   for flag in result.flags) or 'as configured'
  memory = (f'{plan.memory.peak / 2**30:,.1f} / '
            f'{plan.memory.capacity / 2**30:,.0f}')
  rate = plan.units_per_second_per_chip
  published = result.row.published.get(result.topology)
  beside = ''
  if published is not None:
    check = ('above it' if rate > published.tokens_per_second_per_chip
             else '**below it: the bound is wrong**')
    mfu = f', MFU {published.mfu:.1%}' if published.mfu else ''
    beside = (f'{published.tokens_per_second_per_chip:,.0f}{mfu} '
              f'(bound {check}; {published.source})')
  return [flags, memory, f'{plan.roofline.bound * 1e3:,.0f} '
          f'({plan.roofline.limit}; {plan.roofline.serial * 1e3:,.0f} if '
          f'nothing overlapped)', f'{plan.mfu_ceiling:.1%}',
          f'{rate:,.0f} {plan.unit}', beside]


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


def markdown(results: list[Result], command: str, versions: str) -> str:
  """The table of the results so far."""
  lines = [
      '## Every experiment at scale, compiled for its TPU slice from a CPU',
      '',
      f'Written by `{command}` ({versions}); nothing here was measured on '
      f'a TPU. Each row is the experiment with the overrides shown beside '
      f'its name, searched on each slice (`transformer-plan --search`: '
      f'per mesh, remat, micro-batches and a bfloat16 first moment until '
      f'it fits), and its winner compiled by XLA\'s TPU compiler (libtpu) '
      f'for that slice\'s chips.', '',
      'Columns: the winning flags (those that change the experiment\'s '
      'config); peak memory per chip against the chip\'s HBM (GiB); the '
      'lower bound on the step\'s time from the chip\'s datasheet (its '
      'compute, memory or interconnect term, whichever is largest: '
      '`transformer/plan/roofline.py`) and the three terms\' sum, as if '
      'nothing overlapped, which breaks ties between candidates; the MFU '
      'and '
      'throughput per chip that bound allows, which no run can exceed; a '
      'published measurement of the same model on the same chip where '
      'one exists, which must lie below the bound. Cloud names v4 and '
      'v5p slices by TensorCores (v4-32: 16 chips), v5e and v6e by '
      'chips.', '']
  for row in dict.fromkeys(r.row for r in results):
    overrides = ', '.join(f'`{k}={v}`' for k, v in row.overrides.items())
    lines += [f'### {row.label}', '',
              f'`{row.experiment}`' + (f' with {overrides}' if overrides
                                       else ''), '',
              '| slice | winner | peak / HBM (GiB) | step bound (ms) | '
              'MFU at most | per chip at most | published, measured | '
              'search |', '|---|---|---|---|---|---|---|---|']
    for result in (r for r in results if r.row is row):
      cells = _cell(result)
      lines.append(f'| {result.name} (`{result.topology}`) | '
                   + ' | '.join(cells) + f' | {result.compiled} compiled, '
                   f'{result.seconds / 60:,.1f} min |')
    lines.append('')
  return '\n'.join(lines)
