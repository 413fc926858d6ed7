"""Our GPT train step beside flax's `examples/lm1b`, in one process, same
shapes, same optimizer, interleaved timings.

    git clone https://github.com/google/flax /tmp/flax   # outside the repo
    python benchmarks/against_lm1b.py --lm1b=/tmp/flax/examples/lm1b \
        --layers=12 --width=768 --heads=12 --mlp=3072 --vocab=50304 \
        --rows=8 --length=256                            # GPT-2 small

The anchor's model is imported from the given checkout (its code is never
copied here). Both sides: tied input/output embeddings, ReLU MLP, no
dropout, AdamW, unpacked rows of `--length` random tokens, the next-token
loss with an accuracy metric; ours is the real `train.train_step` (with its
non-finite check, as the default config's run jits it) of `decoder.Decoder`
and `language_modeling.lm_loss`. Prints XLA's FLOP and byte counts of each
compiled step, the median of `--repeats` interleaved steps and the range of
the rounds' own ratios.
"""

import functools
import sys

from absl import app
from absl import flags
import flax.linen as nn
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

import timing
from transformer import train
from transformer.models import decoder
from transformer.tasks import language_modeling

_LM1B = flags.DEFINE_string('lm1b', None, 'A google/flax checkout\'s '
                            'examples/lm1b folder.', required=True)
_LAYERS = flags.DEFINE_integer('layers', 12, 'Blocks.')
_WIDTH = flags.DEFINE_integer('width', 768, 'd_model.')
_HEADS = flags.DEFINE_integer('heads', 12, 'Attention heads.')
_MLP = flags.DEFINE_integer('mlp', 3072, 'MLP width.')
_VOCAB = flags.DEFINE_integer('vocab', 50_304, 'Vocabulary size.')
_ROWS = flags.DEFINE_integer('rows', 8, 'Rows per batch.')
_LENGTH = flags.DEFINE_integer('length', 256, 'Tokens per row.')
_REPEATS = flags.DEFINE_integer('repeats', 7, 'Timed steps per side.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'],
                           'Computation dtype of both models (parameters '
                           'stay float32).')


def anchor_step(model, vocab):
  """lm1b's train step (its loss and accuracy), dropout key fixed."""

  def step(state, inputs):
    weights = (inputs > 0).astype(jnp.float32)

    def loss_fn(params):
      logits = model.apply({'params': params}, inputs,
                           rngs={'dropout': jax.random.key(1)})
      loss = -(jax.nn.one_hot(inputs, vocab) * nn.log_softmax(logits)).sum(
          -1) * weights
      return loss.sum() / weights.sum(), logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    accuracy = ((logits.argmax(-1) == inputs) * weights).sum()
    return state.apply_gradients(grads=grads), (loss, accuracy)
  return step


def main(argv):
  del argv
  sys.path.insert(0, _LM1B.value)
  import models as lm1b  # pylint: disable=g-import-not-at-top
  layers, width, vocab = _LAYERS.value, _WIDTH.value, _VOCAB.value
  rows, length = _ROWS.value, _LENGTH.value
  tokens = np.random.default_rng(0).integers(
      3, vocab, (rows, length)).astype(np.int32)
  tx = optax.adamw(1e-4, weight_decay=0.01)

  anchor_model = lm1b.TransformerLM(lm1b.TransformerConfig(
      vocab_size=vocab, output_vocab_size=vocab, logits_via_embedding=True,
      emb_dim=width, num_heads=_HEADS.value, num_layers=layers,
      qkv_dim=width, mlp_dim=_MLP.value, max_len=length, dropout_rate=0.0,
      attention_dropout_rate=0.0, deterministic=False,
      dtype=jnp.dtype(_DTYPE.value)))
  params = jax.jit(lambda r: nn.unbox(anchor_model.init(r, tokens[:1])[
      'params']))(jax.random.key(0))
  anchor_state = train_state.TrainState.create(
      apply_fn=anchor_model.apply, params=params, tx=tx)
  anchor = jax.jit(anchor_step(anchor_model, vocab), donate_argnums=0).lower(
      anchor_state, tokens).compile()

  model = decoder.Decoder(decoder.Config(
      vocab_size=vocab, max_length=length, num_layers=layers,
      d_model=width, num_heads=_HEADS.value, d_ff=_MLP.value,
      activation='relu', dropout_rate=0.0, attention_dropout_rate=0.0,
      dtype=jnp.dtype(_DTYPE.value)))
  batch = {'inputs': tokens, 'targets': tokens,
           'inputs_segmentation': np.ones_like(tokens),
           'inputs_position': np.tile(np.arange(length, dtype=np.int32),
                                      (rows, 1))}
  params = jax.jit(lambda r: nn.unbox(model.init(
      r, tokens[:1], deterministic=True)['params']))(jax.random.key(0))
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                           opt_state=tx.init(params))
  loss_fn = functools.partial(language_modeling.lm_loss, model,
                              label_smoothing=0.0)
  ours = jax.jit(timing.default_train_step(loss_fn=loss_fn, tx=tx, seed=0),
                 donate_argnums=0).lower(state, batch).compile()

  print(f'device: {jax.devices()[0].device_kind}, jax {jax.__version__}; '
        f'{layers} layers, width {width}, vocab {vocab:,}, {rows} x '
        f'{length} tokens, {_DTYPE.value}')
  print(f'lm1b: {timing.compiled_cost(anchor)}; ours: '
        f'{timing.compiled_cost(ours)}')
  seconds = timing.interleaved_steps(
      {'lm1b': (anchor, anchor_state, tokens), 'ours': (ours, state, batch)},
      _REPEATS.value)
  print(timing.comparison('lm1b', seconds['lm1b'], seconds['ours']))


if __name__ == '__main__':
  app.run(main)
