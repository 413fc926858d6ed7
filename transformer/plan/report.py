"""A plan as the console shows it, and as the JSON record `launch/gke.py`
and docs/scaling.md read."""

from __future__ import annotations

from typing import Any, Sequence

from transformer.plan import chips as chips_lib
from transformer.plan import planner

GIB = 2**30


def size(value: float) -> str:
  """Bytes in the largest binary unit that keeps a whole number."""
  for unit, scale in (('GiB', GIB), ('MiB', 2**20), ('KiB', 2**10)):
    if abs(value) >= scale:
      return f'{value / scale:,.2f} {unit}'
  return f'{value:,.0f} B'


def flop_count(value: float) -> str:
  for unit, scale in (('PFLOP', 1e15), ('TFLOP', 1e12), ('GFLOP', 1e9),
                      ('MFLOP', 1e6)):
    if abs(value) >= scale:
      return f'{value / scale:,.3f} {unit}'
  return f'{value:,.0f} FLOP'


def where(plan: planner.Plan) -> str:
  topo = plan.topology
  how = ('CPU devices standing in: no CUDA plugin (' +
         'the memory is the CPU program\'s)' if topo.simulated else
         'compile-only devices')
  return (f'{topo.name}: {topo.chips} {topo.chip.device_kind} chips, '
          f'{topo.hosts} host{"s" if topo.hosts > 1 else ""} of '
          f'{topo.chips_per_host} ({how})')


def verdict(plan: planner.Plan) -> str:
  """'fits' or what does not fit, its largest terms and what shrinks them
  (`shrink`)."""
  memory, capacity = plan.memory, plan.memory.capacity
  if plan.fits:
    share = f' ({memory.peak / capacity:.0%} of {size(capacity)})' \
        if capacity else ''
    return f'fits: peak {size(memory.peak)} a chip{share}'
  terms = {'temporaries (activations kept for the backward pass, '
           'workspace)': memory.temporaries,
           'optimizer state': memory.optimizer,
           'parameters': memory.parameters, 'batch': memory.batch}
  largest = sorted(terms.items(), key=lambda item: -item[1])[:2]
  return (f'does not fit: {size(memory.peak)} a chip of '
          f'{size(capacity)}. Largest: ' + ', '.join(
              f'{name} {size(value)}' for name, value in largest) +
          '.' + (f' The compiler: {plan.error}' if plan.error else ''))


def shrink(plan: planner.Plan, config) -> list[str]:
  """Flags that would shrink the largest terms of a plan that does not
  fit, as their settings now stand."""
  memory, mesh, model = plan.memory, plan.mesh, config.model
  options = []
  state = memory.parameters + memory.optimizer
  if state > memory.temporaries / 4 and mesh['fsdp'] < plan.topology.chips:
    options.append(f'shard parameters and optimizer state over more chips: '
                   f'--config.mesh.fsdp=N (now {mesh["fsdp"]}; data '
                   f'{mesh["data"]})')
  if memory.optimizer and config.optimizer.get('mu_dtype') == 'float32' \
      and config.optimizer.name == 'adam':
    options.append("Adam's first moment in bfloat16: "
                   '--config.optimizer.mu_dtype=bfloat16')
  if 'remat' in model and model.remat != 'full':
    options.append(f'recompute activations in the backward pass: '
                   f'--config.model.remat={"dots" if model.remat == "none" else "full"} '
                   f'(now {model.remat})')
  options.append(f'micro-batches: --config.train.microbatches='
                 f'{2 * config.train.microbatches} (now '
                 f'{config.train.microbatches})')
  options.append('a smaller batch per chip: more chips, or a smaller '
                 'config.data.tokens_per_batch or batch_size')
  options.append('or let --search try meshes, remat and micro-batches')
  return options


def text(plan: planner.Plan, experiment: str, config,
         flags: Sequence[str] = ()) -> str:
  """The console report of a plan."""
  chip: chips_lib.Chip = plan.topology.chip
  memory = plan.memory
  lines = [f'Plan of {experiment} {" ".join(flags)}'.rstrip(),
           f'  on {where(plan)}',
           f'  mesh {_mesh(plan.mesh)}; {plan.units_per_step:,.0f} '
           f'{plan.unit} a step'
           + (' (token slots, padding included)' if plan.unit == 'tokens'
              else ''),
           *([f'  {plan.rounded}'] if plan.rounded else []),
           f'  lowered in {plan.lower_seconds:.1f} s, compiled in '
           f'{plan.compile_seconds:.1f} s',
           '', 'Memory per chip',
           f'  parameters        {size(memory.parameters):>14}',
           f'  optimizer state   {size(memory.optimizer):>14}',
           f'  batch             {size(memory.batch):>14}',
           f'  temporaries       {size(memory.temporaries):>14}'
           '  (activations kept for the backward pass, workspace)',
           f'  peak              {size(memory.peak):>14}'
           + (f'  of {size(memory.capacity)} {_capacity(plan)}'
              if memory.capacity else ''),
           f'  (XLA\'s arguments {size(memory.arguments)}, outputs '
           f'{size(memory.outputs)}, {size(memory.aliased)} of them over '
           f'their donated arguments)',
           f'  => {verdict(plan)}']
  if not plan.fits:
    lines += ['  To shrink it:'] + [f'    {o}' for o in shrink(plan, config)]
    return '\n'.join(lines)
  xla = ('n/a (this compiler gives none)' if plan.xla_flops is None else
         flop_count(plan.xla_flops) + (
             '  (a loop\'s body counted once: layers scanned or '
             'micro-batches)' if plan.loops else ''))
  lines += ['', 'FLOPs per chip a step',
            f'  model (3 x the forward matmuls)  '
            f'{flop_count(plan.model_flops):>16}',
            f'  executed (recomputation too)     '
            f'{flop_count(plan.executed_flops):>16}',
            f'  XLA\'s count                      {xla:>16}']
  lines += ['', 'Collectives per chip a step   count       operands'
            '           sent']
  if not plan.collectives.count:
    lines.append('  none')
  if plan.collectives.unknown_loops:
    lines.append(f'  ({plan.collectives.unknown_loops} loops of unknown trip '
                 f'count counted once: the bytes are a lower bound)')
  for kind in sorted(plan.collectives.count):
    lines.append(f'  {kind:<22}{plan.collectives.count[kind]:>10,.0f}'
                 f'{size(plan.collectives.operand_bytes[kind]):>15}'
                 f'{size(plan.collectives.link_bytes[kind]):>15}')
  bound = plan.roofline
  traffic, flops = plan.memory_traffic, plan.compute_flops
  link = (f'{chip.interconnect_bandwidth / 1e9:,.0f} GB/s'
          if chip.interconnect_bandwidth else 'n/a')
  lines += ['', 'Step time bound per chip (ms)',
            f'  compute       {bound.compute * 1e3:>12,.3f}  '
            f'{flop_count(flops)} at {chip.bf16_flops / 1e12:,.0f} '
            f'TFLOP/s',
            f'  memory        {bound.memory * 1e3:>12,.3f}  '
            f'{size(traffic)} at {chip.hbm_bandwidth / 1e9:,.0f} '
            f'GB/s (arguments, outputs, temporaries written and read)',
            f'  interconnect  {bound.interconnect * 1e3:>12,.3f}  '
            f'{size(plan.collectives.total_link_bytes)} at {link}',
            f'  => at least {bound.bound * 1e3:,.3f} ms a step '
            f'({bound.limit}-bound): MFU at most {plan.mfu_ceiling:.1%}, '
            f'at most {plan.units_per_second_per_chip:,.0f} {plan.unit}/s '
            f'a chip']
  if plan.search is not None:
    fits = (memory.capacity is None or plan.search.peak <= memory.capacity)
    lines += ['', f'Search (evaluation decoding, {plan.search.rows} rows): '
              f'peak {size(plan.search.peak)} a chip, '
              f'{"fits" if fits else "does not fit: lower eval_batch_size"}'
              f', compiled in {plan.search.compile_seconds:.1f} s']
  if plan.fits and plan.mfu_ceiling > 0.999:
    lines.append('  (MFU at most 100%: nothing recomputed, and memory and '
                 'collectives could hide under the matmuls; only a '
                 'measurement says how far below a run lands)')
  lines.append(f'\nChip figures: {chip.source}')
  return '\n'.join(lines)


def _capacity(plan: planner.Plan) -> str:
  if plan.topology.chip.name in chips_lib.GPU_GENERATIONS:
    return (f'({plan.memory.capacity / plan.topology.chip.hbm_bytes:.0%} of '
            f'the GPU\'s {size(plan.topology.chip.hbm_bytes)}, which jax '
            f'takes: XLA_PYTHON_CLIENT_MEM_FRACTION)')
  return 'HBM'


def _mesh(mesh: dict[str, int]) -> str:
  return ' '.join(f'{axis}={size}' for axis, size in mesh.items())


def record(plan: planner.Plan, experiment: str,
           flags: Sequence[str]) -> dict[str, Any]:
  """The plan as JSON: what launch/gke.py and the scaling table read."""
  topo = plan.topology
  return {
      'config': experiment, 'flags': list(flags), 'topology': topo.name,
      'generation': topo.chip.name, 'chips': topo.chips,
      'hosts': topo.hosts, 'chips_per_host': topo.chips_per_host,
      'simulated': topo.simulated, 'mesh': plan.mesh, 'fits': plan.fits,
      'memory_bytes': {
          'parameters': plan.memory.parameters,
          'optimizer': plan.memory.optimizer, 'batch': plan.memory.batch,
          'temporaries': plan.memory.temporaries, 'peak': plan.memory.peak,
          'capacity': plan.memory.capacity},
      'model_flops': plan.model_flops, 'executed_flops': plan.executed_flops,
      'xla_flops': plan.xla_flops,
      'collective_bytes_sent': plan.collectives.link_bytes,
      'bound_seconds': {'compute': plan.roofline.compute,
                        'memory': plan.roofline.memory,
                        'interconnect': plan.roofline.interconnect},
      'step_seconds_bound': plan.roofline.bound if plan.fits else None,
      'mfu_ceiling': plan.mfu_ceiling if plan.fits else None,
      'unit': plan.unit, 'units_per_step': plan.units_per_step,
      'units_per_second_per_chip_bound': (
          plan.units_per_second_per_chip if plan.fits else None),
      'compile_seconds': plan.compile_seconds, 'error': plan.error}
