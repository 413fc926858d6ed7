r"""Fine-tuning speed of a GPT-2 or Llama beside transformers, same model,
same batches, same CPU: tokens per second of a full training step (forward,
backward, clipping, AdamW).

    pip install -e ".[interop]"
    python benchmarks/finetune_against_transformers.py --family=gpt2
    python benchmarks/finetune_against_transformers.py --family=llama

The model is random, made by transformers at `--layers`, `--width` and
`--vocab` and saved; ours loads it with `transformer.interop` (the
converter's mapping) and steps it with `train.train_step` as a run jits
it (`timing.default_train_step`, the task's `lm_loss`); theirs is a torch
loop with AdamW and `clip_grad_norm_`, the model in train mode with
dropout 0. Both use all of this machine's cores. Rounds alternate one
step of each side after a warm-up (ours compiles then); the table gives
the median over `--repeats` rounds and the range of the rounds' own
ratios. The losses of both sides' first step are printed beside each
other: the same model and batch give the same loss.
"""

import functools
import os
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

import timing
from transformer import train
from transformer.interop import gpt2
from transformer.interop import llama
from transformer.models import decoder
from transformer.tasks import language_modeling

_FAMILY = flags.DEFINE_enum('family', 'gpt2', ['gpt2', 'llama'],
                            'The published architecture.')
_LAYERS = flags.DEFINE_integer('layers', 6, 'Blocks.')
_WIDTH = flags.DEFINE_integer('width', 512, 'd_model.')
_VOCAB = flags.DEFINE_integer('vocab', 8_000, 'Vocabulary size.')
_ROWS = flags.DEFINE_integer('rows', 8, 'Rows per batch.')
_LENGTH = flags.DEFINE_integer('length', 256, 'Tokens per row.')
_REPEATS = flags.DEFINE_integer('repeats', 10, 'Timed rounds.')


def _published(directory: str):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  width, layers = _WIDTH.value, _LAYERS.value
  heads = width // 64
  torch.manual_seed(0)
  if _FAMILY.value == 'gpt2':
    config = transformers.GPT2Config(
        vocab_size=_VOCAB.value, n_positions=_LENGTH.value, n_embd=width,
        n_layer=layers, n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=_VOCAB.value - 1,
        eos_token_id=_VOCAB.value - 1)
    model = transformers.GPT2LMHeadModel(config)
  else:
    config = transformers.LlamaConfig(
        vocab_size=_VOCAB.value, hidden_size=width,
        intermediate_size=width * 8 // 3, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=_LENGTH.value, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
  model.save_pretrained(directory)
  return model


def _our_step(directory: str):
  family = gpt2 if _FAMILY.value == 'gpt2' else llama
  config, params = family.load(directory)
  config = config.replace(dropout_rate=0.0, attention_dropout_rate=0.0)
  model = decoder.build(config)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(1e-4, b1=0.9, b2=0.999, weight_decay=0.1))
  state = train.TrainState(step=jnp.asarray(0, jnp.int32),
                           params=jax.tree.map(jnp.asarray, params),
                           opt_state=tx.init(params))
  loss = functools.partial(language_modeling.lm_loss, model,
                           label_smoothing=0.0)
  step = jax.jit(timing.default_train_step(loss_fn=loss, tx=tx, seed=0))
  return step, state


def _their_step(model):
  import torch  # pylint: disable=g-import-not-at-top
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                betas=(0.9, 0.999), weight_decay=0.1)
  model.train()

  def step(rows):
    logits = model(rows[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()
  return step


def main(argv):
  del argv
  import torch  # pylint: disable=g-import-not-at-top
  rows, length = _ROWS.value, _LENGTH.value
  # From 1: the model is loaded in its published ids, unmapped, and our
  # loss reads id 0 as padding (a converted workdir maps ids first).
  ids = np.random.default_rng(0).integers(1, _VOCAB.value,
                                          (rows, length + 1))
  with tempfile.TemporaryDirectory() as directory:
    model = _published(directory)
    step, state = _our_step(directory)
  theirs = _their_step(model)
  batch = {'inputs': jnp.asarray(ids[:, :-1], jnp.int32),
           'targets': jnp.asarray(ids[:, 1:], jnp.int32),
           'inputs_position': jnp.broadcast_to(
               jnp.arange(length, dtype=jnp.int32), (rows, length)),
           'inputs_segmentation': jnp.ones((rows, length), jnp.int32)}
  torch_rows = torch.tensor(ids)
  parameters = sum(p.numel() for p in model.parameters())
  state, sums, _ = step(state, batch)  # compiles
  total, count = jax.device_get(sums['loss'])
  first_theirs = theirs(torch_rows)
  print(f'{_FAMILY.value}: {parameters / 1e6:.1f}M parameters, batch '
        f'{rows} x {length} tokens, {os.cpu_count()} cores, torch '
        f'{torch.get_num_threads()} threads; first-step loss ours '
        f'{total / count:.5f}, transformers {first_theirs:.5f}')
  times = {'ours': [], 'transformers': []}
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    state, sums, _ = step(state, batch)
    jax.block_until_ready(sums)
    times['ours'].append(time.perf_counter() - start)
    start = time.perf_counter()
    theirs(torch_rows)
    times['transformers'].append(time.perf_counter() - start)
  tokens = rows * length
  print('| side | step ms (median) | tokens/s |')
  print('|---|---|---|')
  for side, seconds in times.items():
    median = float(np.median(seconds))
    print(f'| {side} | {median * 1e3:,.0f} | {tokens / median:,.0f} |')
  ratios = np.asarray(times['transformers']) / np.asarray(times['ours'])
  print(f'transformers / ours step time: {np.median(ratios):.2f}x (rounds '
        f'{ratios.min():.2f}x to {ratios.max():.2f}x)')


if __name__ == '__main__':
  app.run(main)
