"""Generation speed of GPT models with the KV cache.

    python benchmarks/generation.py                      # gpt2 on the CPU
    python benchmarks/generation.py --sizes=gpt2,gpt2-medium,gpt2-xl \
        --batch_sizes=1,64                               # on a GPU

For each size and batch size, with randomly initialised parameters (speed
does not depend on them) stored in the computation dtype, and greedy
decoding that never stops early: the time to the first token (prefill of
the prompt plus the first sample) and the decoding rate of the later
tokens, in new tokens per second over the whole batch, both medians of
repeated jitted runs (the same `language_modeling.generate_tokens` that
`python -m transformer.tools.generate` uses).

Decoding is bound by memory bandwidth: each step reads every parameter once
for the whole batch, and each row's keys and values of the positions
cached so far. Bytes per step = parameter bytes + batch x KV-cache bytes
per position x (prompt + new / 2), the cache's mean fill over the timed
steps (the fixed-size cache of `generate_tokens` is read in full, masked,
so this bound is what a kernel needs, not what this one reads). The bound,
batch x bandwidth / bytes per step new tokens per second, is taken with
the datasheet bandwidth (`devices`; "n/a" where none is listed, e.g. on a
CPU) and with the rate of a matrix-vector product over a large matrix
measured in the same run; the table gives the decoding rate as a
percentage of each. The bound is what limits small batches; large ones
become compute bound.
"""


from absl import app
from absl import flags
import jax
import jax.numpy as jnp

import devices
import timing
from transformer.models import decoder

_SIZES = flags.DEFINE_list('sizes', ['gpt2'], 'Named decoder sizes.')
_BATCH_SIZES = flags.DEFINE_list('batch_sizes', ['1', '16'], 'Batch sizes.')
_PROMPT = flags.DEFINE_integer('prompt_length', 64, 'Prompt tokens.')
_NEW = flags.DEFINE_integer('new_tokens', 64, 'Generated tokens.')
_DTYPE = flags.DEFINE_string('dtype', None, 'Default: float32 on CPU, '
                             'bfloat16 on GPU.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs (median).')


def nbytes(tree) -> int:
  return sum(x.size * jnp.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(tree))


def cache_bytes_per_position(model, params) -> int:
  """Bytes of keys and values one position adds to one row's KV cache."""
  # The call that creates a cache sizes it to its input: one position.
  _, cache = jax.eval_shape(lambda p: model.apply(
      {'params': p}, jnp.zeros((1, 1), jnp.int32), deterministic=True,
      mutable=['cache']), params)
  # Keys and values are [B, S, K, H]; the indices are scalars.
  return nbytes([x for x in jax.tree.leaves(cache) if x.ndim == 4])


def main(argv):
  del argv
  gpu = jax.default_backend() == 'gpu'
  dtype = jnp.dtype(_DTYPE.value or ('bfloat16' if gpu else 'float32'))
  kind = jax.devices()[0].device_kind
  datasheet = devices.bandwidth(kind)
  # Cheap (milliseconds a run), so more repeats than the generation runs.
  measured = timing.matvec_bytes_per_second(2**30 if gpu else 2**28, dtype,
                                            max(10, _REPEATS.value),
                                            chain=10 if gpu else 1)
  sheet = ('n/a (not in benchmarks/devices.py)' if datasheet is None
           else f'{datasheet / 1e9:,.0f} GB/s')
  print(f'device: {kind}, jax {jax.__version__}, '
        f'{dtype.name}, prompt {_PROMPT.value} tokens, {_NEW.value} new '
        f'tokens, greedy; datasheet bandwidth {sheet}; matrix-vector '
        f'product measured {measured / 1e9:,.1f} GB/s')
  header = (f'{"size":>12} {"batch":>6} {"first token ms":>15} '
            f'{"decode tokens/s":>16} {"ms per step":>12} '
            f'{"MB per step":>12} {"% of datasheet bound":>21} '
            f'{"% of measured bound":>20}')
  print(header)
  print('-' * len(header))
  for size in _SIZES.value:
    # Weights stored in the computation dtype, as served, so no step reads
    # float32 weights to convert them: the bound counts the stored bytes.
    config = decoder.config_for(size, dtype=dtype, param_dtype=dtype,
                                dropout_rate=0.0)
    model = decoder.build(config, decode=True)
    params = timing.random_decoder_params(config)
    param_bytes = nbytes(params)
    per_position = cache_bytes_per_position(model, params)
    for batch in (int(b) for b in _BATCH_SIZES.value):
      first, per_step = timing.gpt_generation_seconds(
          config, params, batch=batch, prompt_length=_PROMPT.value,
          new_tokens=_NEW.value, repeats=_REPEATS.value, top_k=0,
          greedy=True)
      step_bytes = param_bytes + batch * per_position * (
          _PROMPT.value + _NEW.value / 2)
      # Achieved bytes/s against the bandwidth: the rate over its bound.
      achieved = step_bytes / per_step
      print(f'{size:>12} {batch:>6} {first * 1e3:>15.1f} '
            f'{batch / per_step:>16,.0f} {per_step * 1e3:>12.2f} '
            f'{step_bytes / 1e6:>12,.1f} '
            f'{timing.percent(achieved, datasheet):>21} '
            f'{timing.percent(achieved, measured):>20}')


if __name__ == '__main__':
  app.run(main)
