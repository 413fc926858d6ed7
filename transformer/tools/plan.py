r"""Will it fit, how should it be sharded, how fast can it go: an
experiment's train step compiled for a TPU topology from this CPU.

    python -m transformer.tools.plan --config=experiments/wmt14.py:ende_big \
        --topology=v4:2x2x1 [--config.mesh.fsdp=4 ...] [--search] \
        [--json_out=plan.json]

Prints, per chip, the parameters, optimizer state, batch and temporaries
against the chip's memory, the step's FLOPs, its collectives and a lower
bound on its time (compute, memory and interconnect terms), with the MFU
and throughput that bound allows (`transformer.plan`). A configuration
that does not fit says so, names its largest terms and the flags that
shrink them, and exits 1. `--search` tries meshes, remat, micro-batches
and Adam's first-moment dtype at the config's global batch and prints
those that fit by their bound, the winner's flags as a line to paste.
`--json_out` writes the plan (or the winner's) for `launch/gke.py`.

TPU topologies need libtpu (`pip install -e ".[tpu]"`), no TPU. GPU
topologies (h100:8, h200:8x2) compile for the card with jax's CUDA plugin
where it is installed, else on CPU devices standing in.
"""

import os
import sys

if __name__ == '__main__':
  # Compiling needs no accelerator: jax runs on the CPU, before it starts.
  os.environ.setdefault('JAX_PLATFORMS', 'cpu')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # XLA's C++ warnings

# pylint: disable=g-import-not-at-top,wrong-import-position
import dataclasses
import json

from absl import app
from absl import flags
from ml_collections import config_flags

from transformer.plan import planner
from transformer.plan import report
from transformer.plan import search as search_lib
from transformer.plan import topology as topology_lib
from transformer.tools import cli
# pylint: enable=g-import-not-at-top,wrong-import-position

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config file (experiments/NAME.py[:ARG]).',
    lock_config=True)
_TOPOLOGY = flags.DEFINE_string(
    'topology', None, f'GENERATION:SHAPE, e.g. {topology_lib.EXAMPLES}.')
_SEARCH = flags.DEFINE_bool('search', False, 'Try meshes, remat, '
                            'micro-batches and mu_dtype; print what fits.')
_BUDGET = flags.DEFINE_float('search_budget', 900.0, 'Seconds of compiling '
                             '--search may spend; candidates left after it '
                             'are listed, not compiled.')
_CANDIDATES = flags.DEFINE_integer('max_candidates', 12, 'Candidates '
                                   '--search compiles at most.')
_JSON = flags.DEFINE_string('json_out', None, 'Write the plan (with '
                            '--search, the winner\'s) as JSON here.')
_ROWS = flags.DEFINE_string(
    'rows', '', 'With --table: only the rows whose label holds this text '
    '(the others keep their records).')
_RENDER = flags.DEFINE_bool(
    'render', False, 'With --table: rewrite the page\'s block from the '
    'records (.json beside it), searching nothing.')
_TABLE = flags.DEFINE_string(
    'table', None, 'Search every row of transformer/plan/scaling.py on its '
    'slices and write the table into its block of this page '
    '(docs/scaling.md), row by row.')

# The process exit status of a plan that does not fit.
DOES_NOT_FIT = cli.RUN_FAILED


def _overrides(argv: list[str]) -> list[str]:
  """The --config.FIELD=VALUE flags given, as given."""
  return [arg for arg in argv[1:] if arg.startswith('--config.')]


def main(argv):
  cli.no_arguments(argv)
  if _TABLE.value:
    _write_table(_TABLE.value)
    return
  if _CONFIG.value is None or not _TOPOLOGY.value:
    raise app.UsageError('Give --config=experiments/NAME.py[:ARG] and '
                         f'--topology (e.g. {topology_lib.EXAMPLES}).')
  topology_lib.parse(_TOPOLOGY.value)  # a bad name, before anything loads
  count = topology_lib.simulated_device_count(_TOPOLOGY.value)
  if count:
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               f' --xla_force_host_platform_device_count='
                               f'{count}')
  # As typed (an experiment's name resolves on the machine that runs it).
  spec = cli.config_spec(sys.argv) or flags.FLAGS['config'].config_filename
  given = _overrides(sys.argv)
  config = _CONFIG.value
  if _SEARCH.value:
    tried = search_lib.run(
        config, _TOPOLOGY.value, budget_seconds=_BUDGET.value,
        max_candidates=_CANDIDATES.value,
        progress=lambda t: print(_candidate_line(t), flush=True))
    print('\n' + _search_table(tried))
    best = search_lib.winner(tried)
    if best is None:
      print('\nNo candidate fits.')
      sys.exit(DOES_NOT_FIT)
    flags_ = given + search_lib.changed(config, best.overrides)
    print(f'\nWinner: {" ".join(flags_)}')
    config = _apply(config, best.overrides)
    result = dataclasses.replace(best.plan, search=planner.search_of(
        planner.prepare(config, _TOPOLOGY.value)))
  else:
    flags_ = given
    result = planner.plan(config, _TOPOLOGY.value)
  print('\n' + report.text(result, spec, config, flags_))
  if _JSON.value:
    with open(_JSON.value, 'w', encoding='utf-8') as f:
      json.dump(report.record(result, spec, flags_), f, indent=1)
  if not result.fits:
    sys.exit(DOES_NOT_FIT)


def _write_table(path: str) -> None:
  """The rows of the scaling table (those --rows names) on each of their
  slices; the records (beside the page, .json) and the page's block
  rewritten after each search, so a long run keeps what it found."""
  import datetime  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  from transformer import configs  # pylint: disable=g-import-not-at-top
  from transformer import storage  # pylint: disable=g-import-not-at-top
  from transformer.plan import scaling  # pylint: disable=g-import-not-at-top
  records_path = os.path.splitext(path)[0] + '.json'
  records = (json.loads(storage.read_text(records_path))
             if storage.exists(records_path) else [])
  command = ('python -m transformer.tools.plan --table=' + path +
             f' --max_candidates={_CANDIDATES.value} --search_budget='
             f'{_BUDGET.value:g}')
  versions = (f'{datetime.date.today()}, jax {jax.__version__}, libtpu '
              f'{metadata.version("libtpu")}, {os.cpu_count()} CPU cores')
  rows = [] if _RENDER.value else [
      row for row in scaling.ROWS if _ROWS.value in row.label]
  if not rows and not _RENDER.value:
    raise ValueError(f'--rows={_ROWS.value!r} names no row of the table: '
                     + '; '.join(row.label for row in scaling.ROWS))

  def write_page():
    page = storage.read_text(path) if storage.exists(path) else ''
    storage.write_atomically(path, scaling.in_page(
        page, scaling.markdown(records)))

  for row in rows:
    config = configs.override(configs.load_experiment(row.experiment),
                              row.overrides)
    for name, topology in row.topologies:
      print(f'{row.label} on {name} ({topology})', flush=True)
      start = time.perf_counter()
      tried = search_lib.run(
          config, topology, budget_seconds=_BUDGET.value,
          max_candidates=_CANDIDATES.value,
          progress=lambda t: print(_candidate_line(t), flush=True))
      best = search_lib.winner(tried)
      found = scaling.record(
          row, name, topology, tried,
          search_lib.changed(config, best.overrides) if best else [],
          time.perf_counter() - start)
      records = scaling.merged(records, [{**found, 'versions': versions,
                                          'command': command}])
      storage.write_atomically(records_path, json.dumps(records, indent=1))
      write_page()
  if _RENDER.value:
    write_page()
  print(f'Written: {path} and {records_path}')


def _apply(config, overrides):
  from transformer import configs  # pylint: disable=g-import-not-at-top
  return configs.override(config, overrides)


def _candidate_line(tried: search_lib.Tried) -> str:
  plan = tried.plan
  state = (f'bound {plan.roofline.bound * 1e3:,.3f} ms' if plan.fits
           else 'does not fit')
  return (f'  compiled in {plan.compile_seconds:5.1f} s: peak '
          f'{report.size(plan.memory.peak):>11}, {state}  '
          f'{" ".join(tried.flags)}')


def _search_table(tried: list[search_lib.Tried]) -> str:
  lines = [f'{"rank":>4}  {"peak":>11}  {"bound ms":>10}  {"MFU max":>7}'
           f'  {"per chip max":>18}  flags']
  for rank, t in enumerate(tried, 1):
    plan, flags = t.plan, ' '.join(t.flags)
    if plan is None:
      lines.append(f'{"-":>4}  {"":>11}  {"":>10}  {"":>7}  {"":>18}  '
                   f'{flags}  ({t.skipped})')
    elif not plan.fits:
      lines.append(f'{"-":>4}  {report.size(plan.memory.peak):>11}  '
                   f'{"":>10}  {"":>7}  {"":>18}  {flags}  (does not fit)')
    else:
      rate = f'{plan.units_per_second_per_chip:,.0f} {plan.unit}/s'
      lines.append(f'{rank:>4}  {report.size(plan.memory.peak):>11}  '
                   f'{plan.roofline.bound * 1e3:10,.3f}  '
                   f'{plan.mfu_ceiling:7.1%}  {rate:>18}  {flags}')
  return '\n'.join(lines)


def run() -> None:
  """The `transformer-plan` console script."""
  # As a console script this module was imported without the settings
  # above: jax is imported, but no backend has started yet.
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_platforms', os.environ.get('JAX_PLATFORMS', 'cpu'))
  app.run(cli.handle_errors(main), flags_parser=cli.parse_flags)


if __name__ == '__main__':
  run()
