"""Where a train step's time goes: the ops of one traced step, grouped.

    python benchmarks/profile_step.py --size=gpt2-large --rows=8 \
        --length=2048                                     # on a GPU
    XLA_FLAGS=--xla_cpu_enable_xprof_traceme \
        python benchmarks/profile_step.py --size=base --rows=4  # on a CPU

Builds the same jitted `train.train_step` as `train_throughput.py` (same
flags for rows, length, dtype, attention, remat, scan and packing), prints
its row of that benchmark's table (step time, MFU against the
datasheet), runs
`--profiled_steps` steps under `jax.profiler.trace` and reads the trace
back with `jax.profiler.ProfileData`: the device's kernels on a GPU
(cuBLAS, cuDNN and XLA's fusions by name), XLA's ops on a CPU (which
appear only with the flag above). Prints the time of each kind of op per
step (`kind`), then the single ops that took longest, so that a step's
time is read off the device rather than guessed. The trace stays in
--trace_dir for TensorBoard's or Perfetto's viewer.
"""

import collections
import glob
import os
import re
import tempfile
import time

from absl import app
from absl import flags
import jax

import devices
import train_throughput  # its flags (rows, length, dtype, ...) are ours too

_SIZE = flags.DEFINE_string('size', 'base', 'One named size (see '
                            'train_throughput.py).')
_PROFILED = flags.DEFINE_integer('profiled_steps', 3, 'Steps traced.')
_TOP = flags.DEFINE_integer('top', 25, 'Rows of each table.')
_TRACE_DIR = flags.DEFINE_string('trace_dir', None, 'Where the trace is '
                                 'written; default a temporary folder.')


def device_events(trace_dir: str) -> list[tuple[str, float]]:
  """(name, seconds) of every op the trace holds for the device: a GPU's
  kernels (its streams' lines, else XLA's op line), else the XLA ops of the
  CPU's host threads."""
  path, = glob.glob(os.path.join(trace_dir, '**', '*.xplane.pb'),
                    recursive=True)
  profile = jax.profiler.ProfileData.from_file(path)
  gpus = [p for p in profile.planes if p.name.startswith('/device:GPU')]
  if gpus:
    lines = [l for p in gpus for l in p.lines if 'Stream' in l.name] or [
        l for p in gpus for l in p.lines if l.name == 'XLA Ops']
  else:  # XLA's ops run on its own and Eigen's threads; the rest is Python
    lines = [l for p in profile.planes if p.name == '/host:CPU'
             for l in p.lines if re.match(r'tf_|XLA|xla', l.name)]
  return [(e.name, e.duration_ns * 1e-9) for l in lines for e in l.events
          if not _runtime_span(e.name)]


def _runtime_span(name: str) -> bool:
  """Spans of XLA's CPU runtime that are not ops of their own: its
  internal spans ('::'), the ends of asynchronously run ops ('end: op'),
  and loops and conditionals, whose body ops are listed themselves."""
  return ('::' in name or name.startswith('end: ')
          or re.fullmatch(r'(while|cond|conditional|call)(\.\d+)?', name)
          is not None)


def kind(name: str) -> str:
  """An op's family: its name without the numbered suffix XLA gives each
  instance ('loop_add_fusion.3' -> 'loop_add_fusion'); a long kernel name
  (cuBLAS, cuDNN) cut to its first three parts."""
  name = re.sub(r'[._]\d+$', '', name)
  return '_'.join(name.split('_')[:3]) if len(name) > 40 else name


def main(argv):
  del argv
  rows, length, dtype = train_throughput.shape_flags()
  compiled = train_throughput.compiled_step(_SIZE.value, rows, length, dtype)
  step, state, batch, *_ = compiled
  # The step's wall time and MFU first (datasheet peak; no matmul timed).
  print(train_throughput.describe(rows, length, dtype))
  train_throughput.print_header()
  print(train_throughput.row(_SIZE.value, rows, compiled, devices.peak_flops(
      jax.devices()[0].device_kind, dtype), None), flush=True)
  trace_dir = _TRACE_DIR.value or tempfile.mkdtemp(prefix='profile_step_')
  batch = jax.device_put(batch)
  with jax.profiler.trace(trace_dir):
    start = time.perf_counter()
    for _ in range(_PROFILED.value):  # back to back, as a training loop
      state = step(state, batch)[0]
    jax.block_until_ready(state)
    traced = (time.perf_counter() - start) / _PROFILED.value
  totals, ops = collections.Counter(), collections.Counter()
  for name, seconds in device_events(trace_dir):
    totals[kind(name)] += seconds / _PROFILED.value
    ops[name] += seconds / _PROFILED.value
  if not ops:
    raise SystemExit(f'No device ops in the trace at {trace_dir}; on a CPU '
                     'set XLA_FLAGS=--xla_cpu_enable_xprof_traceme.')
  print(f'{_SIZE.value}, {rows} x {length}, {dtype.name}, attention '
        f'{flags.FLAGS.attention} on {jax.devices()[0].device_kind}: '
        f'{sum(ops.values()) * 1e3:,.1f} ms of ops per step, summed over '
        f'streams and threads, in {traced * 1e3:,.1f} ms per traced step '
        f'({_PROFILED.value} steps traced, {trace_dir})')
  for title, counter in (('kind of op', totals), ('op', ops)):
    print(f'\n{"ms per step":>12} {"share":>6}  {title}')
    for name, seconds in counter.most_common(_TOP.value):
      print(f'{seconds * 1e3:>12.2f} {seconds / sum(ops.values()):>6.1%}  '
            f'{name[:100]}')


if __name__ == '__main__':
  app.run(main)
