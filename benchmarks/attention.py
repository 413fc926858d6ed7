"""Forward+backward time and memory of the attention kernels.

    python benchmarks/attention.py                      # CPU: lengths 128..1024
    python benchmarks/attention.py --lengths=128,256,512,1024,2048,4096

For every kernel of `transformer.attention` and sequence length T = S, times
jit(grad(sum(attention(q, k, v)))) with respect to q, k and v, and reads the
compiled program's temporary memory (what the kernel needs beyond its inputs
and outputs; the einsum kernel materialises the [B, N, T, S] weights). FLOPs
count the two matmuls of the forward pass, 4 B N T S H, three times for
forward plus backward. Each row is set against a dense square matmul of the
same FLOP count timed in the same run, so the last column says how close the
kernel comes to the machine's matmul rate.
"""

import functools

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

import timing
from transformer import attention

_LENGTHS = flags.DEFINE_list('lengths', None,
                             'Sequence lengths; default 128..1024 on CPU, '
                             '128..4096 on GPU.')
_IMPLEMENTATIONS = flags.DEFINE_list(
    'implementations', None, 'Kernels; default einsum,xla (+cudnn on GPU).')
_BATCH = flags.DEFINE_integer('batch', 4, 'Batch size B.')
_HEADS = flags.DEFINE_integer('heads', 8, 'Heads N.')
_HEAD_DIM = flags.DEFINE_integer('head_dim', 64, 'Head dim H.')
_DTYPE = flags.DEFINE_string('dtype', None,
                             'float32 or bfloat16; default bfloat16 on GPU.')
_CAUSAL = flags.DEFINE_bool('causal', False, 'Causal mask.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed runs (median taken).')


@functools.cache
def matmul_flops_per_second(n: int, dtype) -> float:
  return timing.matmul_flops_per_second(n, dtype, _REPEATS.value)


def temp_bytes(compiled) -> float:
  analysis = compiled.memory_analysis()
  return float(getattr(analysis, 'temp_size_in_bytes', float('nan')))


def main(argv):
  del argv
  gpu = jax.default_backend() == 'gpu'
  lengths = [int(x) for x in _LENGTHS.value or (
      [128, 256, 512, 1024, 2048, 4096] if gpu else [128, 256, 512, 1024])]
  implementations = _IMPLEMENTATIONS.value or (
      ['einsum', 'xla', 'cudnn'] if gpu else ['einsum', 'xla'])
  dtype = jnp.dtype(_DTYPE.value or ('bfloat16' if gpu else 'float32'))
  b, n, h = _BATCH.value, _HEADS.value, _HEAD_DIM.value
  print(f'device: {jax.devices()[0].device_kind} ({jax.default_backend()}), '
        f'jax {jax.__version__}, B={b} N={n} H={h} {dtype.name}'
        f'{" causal" if _CAUSAL.value else ""}')
  header = (f'{"kernel":>7} {"T=S":>5} {"fwd+bwd ms":>11} {"temp MiB":>9} '
            f'{"TFLOP/s":>8} {"matmul TFLOP/s":>15} {"% of matmul":>12}')
  print(header)
  print('-' * len(header))
  for t in lengths:
    keys = jax.random.split(jax.random.key(t), 3)
    q, k, v = (jax.random.normal(key, (b, t, n, h), dtype) for key in keys)
    flops = 3 * 4 * b * n * t * t * h
    side = int(round((flops / 2)**(1 / 3)))
    reference = matmul_flops_per_second(side, dtype)
    for impl in implementations:
      loss = lambda q, k, v, impl=impl: attention.dot_product_attention(
          q, k, v, causal=_CAUSAL.value,
          implementation=impl).astype(jnp.float32).sum()
      step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
      try:
        compiled = step.lower(q, k, v).compile()
        seconds = timing.median_seconds(compiled, q, k, v,
                                        repeats=_REPEATS.value)
      except Exception as e:  # e.g. out of memory at long lengths
        print(f'{impl:>7} {t:>5} failed: {type(e).__name__}: '
              f'{str(e).splitlines()[0][:80]}')
        continue
      achieved = flops / seconds
      print(f'{impl:>7} {t:>5} {seconds * 1e3:>11.2f} '
            f'{temp_bytes(compiled) / 2**20:>9.1f} {achieved / 1e12:>8.3f} '
            f'{reference / 1e12:>15.3f} {100 * achieved / reference:>11.1f}%')


if __name__ == '__main__':
  app.run(main)
