"""Our translation train step beside flax's `examples/wmt`, in one process,
same shapes, same optimizer, interleaved timings.

    git clone https://github.com/google/flax /tmp/flax   # outside the repo
    python benchmarks/against_wmt.py --wmt=/tmp/flax/examples/wmt
        # Transformer-base, 16 x 64 tokens per side, vocab 32,000

The anchor's model is imported from the given checkout (its code is never
copied here; its train.py needs TensorFlow, so its loss is restated below:
label-smoothed cross-entropy less the smoothed targets' entropy, and the
argmax accuracy, as its `train_step` computes them). Both sides: shared
and tied embeddings, residual dropout `--dropout`, attention dropout
`--attention_dropout` (none by default, as the paper), label smoothing
0.1, Adam (b2 0.98, eps 1e-9), unpacked rows of random
tokens. Ours is the real `train.train_step` (with its non-finite check, as
the default config's run jits it) of `encoder_decoder.Transformer` and
`translation.translation_loss`. Prints XLA's FLOP and byte counts of each
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
from transformer.models import encoder_decoder
from transformer.tasks import translation

_WMT = flags.DEFINE_string('wmt', None, "A google/flax checkout's "
                           'examples/wmt folder.', required=True)
_SIZE = flags.DEFINE_string('size', 'base', 'Named MT Transformer size.')
_VOCAB = flags.DEFINE_integer('vocab', 32_000, 'Shared vocabulary size.')
_ROWS = flags.DEFINE_integer('rows', 16, 'Rows per batch.')
_LENGTH = flags.DEFINE_integer('length', 64, 'Tokens per row and side.')
_DROPOUT = flags.DEFINE_float('dropout', 0.1, 'Residual dropout rate.')
_ATTENTION_DROPOUT = flags.DEFINE_float(
    'attention_dropout', 0.0, 'Attention dropout rate of both (the paper '
    "has none; flax wmt's default is 0.1).")
_REPEATS = flags.DEFINE_integer('repeats', 7, 'Timed steps per side.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'],
                           'Computation dtype of both models (parameters '
                           'stay float32).')
_SMOOTHING = 0.1


def anchor_step(model, vocab: int):
  """flax wmt's train step: its loss (less the normalising constant) and
  accuracy, dropout keys folded in per step as it does."""
  confidence = 1.0 - _SMOOTHING
  low = _SMOOTHING / (vocab - 1)
  constant = -(confidence * np.log(confidence)
               + (vocab - 1) * low * np.log(low + 1e-20))

  def step(state, batch):
    inputs, targets = batch
    weights = (targets > 0).astype(jnp.float32)

    def loss_fn(params):
      logits = model.apply({'params': params}, inputs, targets, rngs={
          'dropout': jax.random.fold_in(jax.random.key(1), state.step)})
      soft = jax.nn.one_hot(targets, vocab) * (confidence - low) + low
      loss = (-(soft * nn.log_softmax(logits)).sum(-1) - constant) * weights
      return loss.sum() / weights.sum(), logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    accuracy = ((logits.argmax(-1) == targets) * weights).sum()
    return state.apply_gradients(grads=grads), loss, accuracy
  return step


def main(argv):
  del argv
  sys.path.insert(0, _WMT.value)
  import models as wmt  # pylint: disable=g-import-not-at-top
  rows, length, vocab = _ROWS.value, _LENGTH.value, _VOCAB.value
  dtype = jnp.dtype(_DTYPE.value)
  rng = np.random.default_rng(0)
  inputs, targets = (rng.integers(3, vocab, (rows, length)).astype(np.int32)
                     for _ in range(2))
  tx = optax.adam(1e-4, b1=0.9, b2=0.98, eps=1e-9)
  config = encoder_decoder.config_for(
      _SIZE.value, vocab_size=vocab, max_length=length,
      dropout_rate=_DROPOUT.value,
      attention_dropout_rate=_ATTENTION_DROPOUT.value, dtype=dtype)

  anchor_model = wmt.Transformer(wmt.TransformerConfig(
      vocab_size=vocab, output_vocab_size=vocab, share_embeddings=True,
      logits_via_embedding=True, emb_dim=config.d_model,
      num_heads=config.num_heads, num_layers=config.num_layers,
      qkv_dim=config.d_model, mlp_dim=config.d_ff, max_len=length,
      dropout_rate=_DROPOUT.value,
      attention_dropout_rate=_ATTENTION_DROPOUT.value, deterministic=False,
      dtype=dtype))
  params = jax.jit(lambda r: nn.unbox(anchor_model.init(
      r, inputs[:1], targets[:1])['params']))(jax.random.key(0))
  anchor_state = train_state.TrainState.create(
      apply_fn=anchor_model.apply, params=params, tx=tx)
  anchor_batch = (inputs, targets)
  anchor = jax.jit(anchor_step(anchor_model, vocab), donate_argnums=0).lower(
      anchor_state, anchor_batch).compile()

  model = encoder_decoder.Transformer(config)
  ones, positions = np.ones_like(inputs), np.tile(
      np.arange(length, dtype=np.int32), (rows, 1))
  batch = {'inputs': inputs, 'targets': targets,
           'inputs_segmentation': ones, 'targets_segmentation': ones,
           'inputs_position': positions, 'targets_position': positions}
  params = jax.jit(lambda r: nn.unbox(model.init(
      r, inputs[:1], targets[:1], deterministic=True)['params']))(
          jax.random.key(0))
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                           opt_state=tx.init(params))
  loss_fn = functools.partial(translation.translation_loss, model,
                              label_smoothing=_SMOOTHING)
  ours = jax.jit(timing.default_train_step(loss_fn=loss_fn, tx=tx, seed=0),
                 donate_argnums=0).lower(state, batch).compile()

  print(f'device: {jax.devices()[0].device_kind}, jax {jax.__version__}; '
        f'Transformer {_SIZE.value}, vocab {vocab:,}, {rows} x {length} '
        f'tokens per side, dropout {_DROPOUT.value}, attention dropout '
        f'{_ATTENTION_DROPOUT.value}, {_DTYPE.value}')
  print(f'flax wmt: {timing.compiled_cost(anchor)}; ours: '
        f'{timing.compiled_cost(ours)}')
  seconds = timing.interleaved_steps(
      {'wmt': (anchor, anchor_state, anchor_batch),
       'ours': (ours, state, batch)}, _REPEATS.value)
  print(timing.comparison('flax wmt', seconds['wmt'], seconds['ours']))


if __name__ == '__main__':
  app.run(main)
