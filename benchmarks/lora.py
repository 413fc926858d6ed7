r"""Low-rank adapters against full fine-tuning: optimizer-state bytes and
train-step time of the same decoder and batch.

    python benchmarks/lora.py --layers=6 --width=512 --rank=8
    python benchmarks/lora.py --family=llama --layers=12 --width=768

A GPT- or Llama-shaped decoder (`--layers` blocks of `--width`, `--vocab`
tokens; Llama's as benchmarks/finetune_against_transformers.py makes it:
half as many key/value heads as query heads, SwiGLU of width 8/3 D),
randomly initialised; one `train.train_step` as a run jits it, with the
LM experiments' optimizer (AdamW, clipping at 1): over every parameter,
and over rank-`--rank` adapters on `--targets` alone
(`optimizers.build(adapters_only=True)`). Step times are the median of
`--repeats` rounds, the two steps alternating.
"""

import functools
import time

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import timing
from transformer import optimizers
from transformer import train
from transformer.attention import lora
from transformer.models import decoder
from transformer.tasks import language_modeling

_FAMILY = flags.DEFINE_enum('family', 'gpt', ['gpt', 'llama'],
                            'The decoder\'s shape.')
_LAYERS = flags.DEFINE_integer('layers', 6, 'Blocks.')
_WIDTH = flags.DEFINE_integer('width', 512, 'd_model.')
_VOCAB = flags.DEFINE_integer('vocab', 8_000, 'Vocabulary size.')
_RANK = flags.DEFINE_integer('rank', 8, 'Adapter rank.')
_TARGETS = flags.DEFINE_string('targets', 'query,value',
                               'Projections with adapters.')
_ROWS = flags.DEFINE_integer('rows', 8, 'Rows per batch.')
_LENGTH = flags.DEFINE_integer('length', 256, 'Tokens per row.')
_REPEATS = flags.DEFINE_integer('repeats', 10, 'Timed rounds.')


def _step_and_state(config, adapters_only: bool):
  model = decoder.build(config)
  params = nn.unbox(jax.jit(lambda r: decoder.Decoder(config).init(
      r, jnp.ones((1, 8), jnp.int32), deterministic=True))(
          jax.random.key(0))['params'])
  settings = language_modeling.default_config().optimizer
  settings.warmup_steps = 0
  tx, _ = optimizers.build(settings, 1_000, adapters_only=adapters_only)
  state = train.TrainState(step=jnp.asarray(0, jnp.int32), params=params,
                           opt_state=tx.init(params))
  loss = functools.partial(language_modeling.lm_loss, model,
                           label_smoothing=0.0)
  trainable = optimizers.is_adapter_path if adapters_only else None
  return jax.jit(timing.default_train_step(loss_fn=loss, tx=tx, seed=0,
                                           trainable=trainable),
                 donate_argnums=0), state


def _bytes(tree) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(tree))


def main(argv):
  del argv
  heads = _WIDTH.value // 64
  shape = (dict(num_kv_heads=max(1, heads // 2), d_ff=_WIDTH.value * 8 // 3)
           if _FAMILY.value == 'llama' else {})
  base = decoder.config_for(
      'llama-tiny' if _FAMILY.value == 'llama' else 'tiny',
      vocab_size=_VOCAB.value, max_length=_LENGTH.value,
      num_layers=_LAYERS.value, d_model=_WIDTH.value, num_heads=heads,
      dropout_rate=0.0, **shape)
  adapted = base.replace(lora_rank=_RANK.value, lora_targets=_TARGETS.value)
  rows, length = _ROWS.value, _LENGTH.value
  ids = np.random.default_rng(0).integers(1, _VOCAB.value, (rows, length + 1))
  batch = {'inputs': jnp.asarray(ids[:, :-1], jnp.int32),
           'targets': jnp.asarray(ids[:, 1:], jnp.int32),
           'inputs_position': jnp.broadcast_to(
               jnp.arange(length, dtype=jnp.int32), (rows, length)),
           'inputs_segmentation': jnp.ones((rows, length), jnp.int32)}
  sides = {'full fine-tuning': _step_and_state(base, False),
           f'LoRA r={_RANK.value} ({_TARGETS.value})':
               _step_and_state(adapted, True)}
  times = {name: [] for name in sides}
  states = {name: state for name, (_, state) in sides.items()}
  for name, (step, _) in sides.items():  # compiles
    states[name] = jax.block_until_ready(step(states[name], batch)[0])
  for _ in range(_REPEATS.value):
    for name, (step, _) in sides.items():
      start = time.perf_counter()
      states[name] = jax.block_until_ready(step(states[name], batch)[0])
      times[name].append(time.perf_counter() - start)
  print(f'{_FAMILY.value}: {_LAYERS.value} blocks x {_WIDTH.value}, '
        f'{_VOCAB.value:,} tokens, '
        f'batch {rows} x {length}; median of {_REPEATS.value} steps')
  print('| | trainable parameters | optimizer state | step ms | tokens/s |')
  print('|---|---|---|---|---|')
  for name, state in states.items():
    flat = jax.tree_util.tree_flatten_with_path(state.params)[0]
    trainable = sum(x.size for path, x in flat if 'LoRA' not in name or
                    lora.is_adapter(tuple(getattr(k, 'key', k)
                                          for k in path)))
    median = float(np.median(times[name]))
    print(f'| {name} | {trainable:,} | {_bytes(state.opt_state) / 1e6:,.2f} '
          f'MB | {median * 1e3:,.0f} | {rows * length / median:,.0f} |')


if __name__ == '__main__':
  app.run(main)
