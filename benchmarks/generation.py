"""Generation speed of GPT models with the KV cache.

    python benchmarks/generation.py                      # gpt2 on the CPU
    python benchmarks/generation.py --sizes=gpt2,gpt2-medium,gpt2-xl \
        --batch_sizes=1,64                               # on a GPU

For each size and batch size, with randomly initialised parameters (speed
does not depend on them) and greedy decoding that never stops early: the
time to the first token (prefill of the prompt plus the first sample) and
the decoding rate of the later tokens, in new tokens per second over the
whole batch, both medians of repeated jitted runs (the same
`language_modeling.generate_tokens` that `python -m transformer.generate`
uses).
"""

import functools

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import timing
from transformer.models import decoder
from transformer.tasks import language_modeling

_SIZES = flags.DEFINE_list('sizes', ['gpt2'], 'Named decoder sizes.')
_BATCH_SIZES = flags.DEFINE_list('batch_sizes', ['1', '16'], 'Batch sizes.')
_PROMPT = flags.DEFINE_integer('prompt_length', 64, 'Prompt tokens.')
_NEW = flags.DEFINE_integer('new_tokens', 64, 'Generated tokens.')
_DTYPE = flags.DEFINE_string('dtype', None, 'Default: float32 on CPU, '
                             'bfloat16 on GPU.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs (median).')


def main(argv):
  del argv
  gpu = jax.default_backend() == 'gpu'
  dtype = jnp.dtype(_DTYPE.value or ('bfloat16' if gpu else 'float32'))
  print(f'device: {jax.devices()[0].device_kind}, jax {jax.__version__}, '
        f'{dtype.name}, prompt {_PROMPT.value} tokens, {_NEW.value} new '
        f'tokens, greedy')
  header = (f'{"size":>12} {"batch":>6} {"first token ms":>15} '
            f'{"decode tokens/s":>16} {"ms per step":>12}')
  print(header)
  print('-' * len(header))
  for size in _SIZES.value:
    config = decoder.config_for(size, dtype=dtype, dropout_rate=0.0)
    model = decoder.build(config, decode=True)
    params = jax.jit(lambda r, c=config: nn.unbox(decoder.Decoder(c).init(
        r, jnp.ones((1, 8), jnp.int32), deterministic=True))['params'])(
            jax.random.key(0))
    for batch in (int(b) for b in _BATCH_SIZES.value):
      tokens = jnp.asarray(np.random.default_rng(0).integers(
          3, config.vocab_size, (batch, _PROMPT.value)), jnp.int32)
      pad = jnp.zeros((batch,), jnp.int32)
      # EOS id -1 never occurs: every row generates all its tokens.
      run = lambda n: jax.jit(functools.partial(
          language_modeling.generate_tokens, model, max_new_tokens=n,
          top_k=0, greedy=True, eos_id=-1))
      first, full = (timing.median_seconds(
          run(n), params, tokens, pad, jax.random.key(0), 1.0, 1.0,
          repeats=_REPEATS.value) for n in (1, _NEW.value))
      per_step = (full - first) / (_NEW.value - 1)
      print(f'{size:>12} {batch:>6} {first * 1e3:>15.1f} '
            f'{batch / per_step:>16,.0f} {per_step * 1e3:>12.2f}')


if __name__ == '__main__':
  app.run(main)
