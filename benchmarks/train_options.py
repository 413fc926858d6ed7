"""Compile time, step time and memory of the real train step under meshes
and memory options.

    python benchmarks/train_options.py --config=experiments/lm_offline.py \
        --config.model.size=gpt2 --config.data.tokens_per_batch=512 \
        --variants='base;model.remat=dots;model.remat=full;model.scan_layers=True;train.microbatches=4;optimizer.mu_dtype=bfloat16'
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python benchmarks/train_options.py --config=experiments/lm_offline.py \
        --variants='mesh.data=8;mesh.fsdp=8,mesh.data=1;mesh.tensor=8,mesh.data=1;mesh.data=2,mesh.fsdp=2,mesh.tensor=2'

Builds the experiment's own `train.Trainer` (its task, batches, optimizer,
shardings) once per variant: a variant is `base` or comma-separated
`field=value` overrides of the config. Prints the seconds to trace and
compile the step, XLA's memory analysis of the compiled step per device
(arguments: parameters, optimizer state and batch; temporaries: activations
kept for the backward pass and workspace), and the median step time.
"""

import tempfile
import time

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from transformer import configs
from transformer import sharding
from transformer import train

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment.')
_VARIANTS = flags.DEFINE_string(
    'variants', 'base', "';'-separated variants, each 'base' or "
    "comma-separated field=value config overrides.")
_STEPS = flags.DEFINE_integer('steps', 3, 'Timed steps (median taken).')


def measure(config, workdir: str) -> dict:
  trainer = train.Trainer(config, workdir)
  with sharding.active(trainer.mesh, trainer.rules):
    state = trainer.initialise()
    batch = sharding.global_batch(next(trainer.task.train_iter(0)),
                                  trainer.mesh)
    start = time.perf_counter()
    compiled = trainer.train_step.lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()

    def step(state):
      return compiled(state, batch)[0]

    state = jax.block_until_ready(step(state))  # warm-up
    times = []
    for _ in range(_STEPS.value):
      start = time.perf_counter()
      state = jax.block_until_ready(step(state))
      times.append(time.perf_counter() - start)
  return dict(mesh='x'.join(str(v) for v in trainer.mesh.shape.values()),
              compile_s=compile_seconds,
              arguments_mib=memory.argument_size_in_bytes / 2**20,
              temp_mib=memory.temp_size_in_bytes / 2**20,
              step_ms=float(np.median(times)) * 1e3)


def main(argv):
  del argv
  if _CONFIG.value is None:
    raise app.UsageError('Give --config=experiments/<name>.py[:arg].')
  print(f'device: {jax.devices()[0].device_kind} x {jax.device_count()}, '
        f'jax {jax.__version__}; memory per device (XLA memory analysis)')
  header = (f'{"variant":>48} {"mesh d-f-t":>10} {"compile s":>10} '
            f'{"args MiB":>9} {"temp MiB":>9} {"step ms":>9}')
  print(header)
  print('-' * len(header))
  for variant in _VARIANTS.value.split(';'):
    with tempfile.TemporaryDirectory() as workdir:
      changes = '' if variant == 'base' else variant
      row = measure(configs.override(_CONFIG.value, changes), workdir)
    print(f'{variant:>48} {row["mesh"]:>10} {row["compile_s"]:>10.1f} '
          f'{row["arguments_mib"]:>9.1f} {row["temp_mib"]:>9.1f} '
          f'{row["step_ms"]:>9.1f}', flush=True)


if __name__ == '__main__':
  app.run(main)
