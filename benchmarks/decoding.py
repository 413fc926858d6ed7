"""Decoding speed: beam search and greedy search of the MT Transformer,
sampling of GPT, optionally beside flax's `examples/wmt` beam search.

    python benchmarks/decoding.py                        # on the CPU
    git clone https://github.com/google/flax /tmp/flax   # outside the repo
    python benchmarks/decoding.py --wmt=/tmp/flax/examples/wmt

Randomly initialised weights (speed does not depend on them) and EOS never
chosen (`eos_id=-1`), so every search runs all its steps: the numbers are
those of the longest outputs. For the MT Transformer (`--size`, shared
vocabulary `--vocab`), `--batch` source sentences of `--source_length`
tokens are translated into `--max_length` target tokens, cache creation
and encoding included, by the same `translation` search that `translate`
and evaluation run. Reported: sentences/s, target tokens/s (best
hypothesis tokens, B x max_length per call), and the time to the first
token (the same call with max_length 1). For GPT (`--gpt_sizes`), prompts
of `--prompt_length` random tokens are continued by `--new_tokens` sampled
tokens (temperature 1, top-k 40) with `language_modeling.generate_tokens`,
as `generate` does.

With `--wmt`, flax's beam search (its `models.Transformer` and
`decode.beam_search`, imported from the given checkout, never copied here;
cache creation included as in its `predict_step`) runs at the same shapes,
interleaved with ours, and the table gives flax / ours.
"""

import functools
import sys
import time

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import timing
from transformer import decoding
from transformer.models import decoder
from transformer.models import encoder_decoder

_WMT = flags.DEFINE_string('wmt', None, 'A google/flax checkout\'s '
                           'examples/wmt folder: adds its beam search.')
_SIZE = flags.DEFINE_string('size', 'base', 'Named MT Transformer size.')
_VOCAB = flags.DEFINE_integer('vocab', 32_000, 'Shared vocabulary size.')
_BATCH = flags.DEFINE_integer('batch', 16, 'Source sentences per call.')
_SOURCE = flags.DEFINE_integer('source_length', 32, 'Source tokens.')
_MAX_LENGTH = flags.DEFINE_integer('max_length', 48, 'Target tokens.')
_BEAM = flags.DEFINE_integer('beam', 4, 'Beam size.')
_ALPHA = flags.DEFINE_float('alpha', 0.6, 'Length penalty exponent.')
_GPT_SIZES = flags.DEFINE_list('gpt_sizes', ['gpt2'], 'Named GPT sizes '
                               'for the sampling rows ("" for none).')
_GPT_BATCHES = flags.DEFINE_list('gpt_batch_sizes', ['1', '16'],
                                 'Batch sizes of the sampling rows.')
_PROMPT = flags.DEFINE_integer('prompt_length', 64, 'GPT prompt tokens.')
_NEW = flags.DEFINE_integer('new_tokens', 64, 'GPT sampled tokens.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed calls (median).')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'],
                           "Computation dtype of the models (flax's too); "
                           'parameters stay float32.')

NEVER = -1  # an EOS id no search can emit


def our_search(model, beam_size: int, max_length: int):
  """The translation task's search (`TranslationTask._search`'s body)."""

  def search(params, inputs):
    state = encoder_decoder.init_decoding(model, params, inputs, max_length,
                                          beam_size)
    step_fn = functools.partial(encoder_decoder.decoding_step, model, params)
    if beam_size == 1:
      return decoding.greedy_search(
          step_fn, state, batch_size=inputs.shape[0], max_length=max_length,
          eos_id=NEVER)[0]
    return decoding.beam_search(
        step_fn, state, batch_size=inputs.shape[0], beam_size=beam_size,
        max_length=max_length, eos_id=NEVER, alpha=_ALPHA.value)[0][:, 0]
  return jax.jit(search)


def flax_search(wmt_folder: str, config, max_length: int):
  """flax examples/wmt's `initialize_cache` + `predict_step`, at our shapes
  (its `max_decode_len` counts the start position: max_length + 1)."""
  sys.path.insert(0, wmt_folder)
  import decode as wmt_decode  # pylint: disable=g-import-not-at-top
  import models as wmt_models  # pylint: disable=g-import-not-at-top
  wmt_config = wmt_models.TransformerConfig(
      vocab_size=config.vocab_size, output_vocab_size=config.vocab_size,
      share_embeddings=True, logits_via_embedding=True,
      emb_dim=config.d_model, num_heads=config.num_heads,
      num_layers=config.num_layers, qkv_dim=config.d_model,
      mlp_dim=config.d_ff, max_len=max(_SOURCE.value, max_length + 1),
      dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True,
      dtype=jnp.dtype(_DTYPE.value))
  decode_config = wmt_config.replace(decode=True)
  model, decode_model = (wmt_models.Transformer(c)
                         for c in (wmt_config, decode_config))

  def search(params, inputs):
    beam = _BEAM.value
    cache = decode_model.init(
        jax.random.key(0), jnp.ones(inputs.shape),
        jnp.ones((inputs.shape[0], max_length + 1)))['cache']
    encoded = wmt_decode.flat_batch_beam_expand(
        model.apply({'params': params}, inputs, method='encode'), beam)
    raw_inputs = wmt_decode.flat_batch_beam_expand(inputs, beam)

    def tokens_to_logits(ids, flat_cache):
      logits, new = decode_model.apply(
          {'params': params, 'cache': flat_cache}, encoded, raw_inputs, ids,
          mutable=['cache'], method='decode')
      return logits.squeeze(axis=1), new['cache']
    seqs, _ = wmt_decode.beam_search(
        inputs, cache, tokens_to_logits, beam_size=beam, alpha=_ALPHA.value,
        eos_id=NEVER, max_decode_len=max_length + 1)
    return seqs[:, -1, 1:]  # flax keeps the best beam last

  init = jax.jit(lambda key, inputs: model.init(
      key, inputs, jnp.ones((inputs.shape[0], max_length)))['params'])
  return jax.jit(search), init


def interleaved(calls, args, repeats: int) -> list[float]:
  """Median seconds of each call, alternating calls in every round."""
  for call, arg in zip(calls, args):
    jax.block_until_ready(call(*arg))  # compiles
  times = [[] for _ in calls]
  for _ in range(repeats):
    for call, arg, kept in zip(calls, args, times):
      start = time.perf_counter()
      jax.block_until_ready(call(*arg))
      kept.append(time.perf_counter() - start)
  return [float(np.median(t)) for t in times]


def mt_rows(repeats: int) -> None:
  batch, length = _BATCH.value, _MAX_LENGTH.value
  config = encoder_decoder.config_for(
      _SIZE.value, vocab_size=_VOCAB.value, dropout_rate=0.0,
      max_length=max(_SOURCE.value, length), dtype=jnp.dtype(_DTYPE.value))
  model = encoder_decoder.build(config, decode=True)
  inputs = jnp.asarray(np.random.default_rng(0).integers(
      3, config.vocab_size, (batch, _SOURCE.value)), jnp.int32)
  params = jax.jit(lambda r: nn.unbox(encoder_decoder.Transformer(
      config).init(r, inputs, inputs, deterministic=True))['params'])(
          jax.random.key(0))
  print(f'\nMT Transformer {_SIZE.value}, vocab {config.vocab_size:,}: '
        f'{batch} sentences of {_SOURCE.value} tokens -> {length} tokens, '
        f'alpha {_ALPHA.value}, {_DTYPE.value}')
  header = (f'{"search":>24} {"sentences/s":>12} {"tokens/s":>10} '
            f'{"ms per call":>12} {"first token ms":>15} '
            f'{"flax / ours":>12}')
  print(header)
  print('-' * len(header))
  for beam in sorted({1, _BEAM.value}):
    full, first = our_search(model, beam, length), our_search(model, beam, 1)
    calls, args = [full, first], [(params, inputs), (params, inputs)]
    if _WMT.value and beam > 1:
      anchor, anchor_init = flax_search(_WMT.value, config, length)
      calls.append(anchor)
      args.append((anchor_init(jax.random.key(0), inputs), inputs))
    seconds = interleaved(calls, args, repeats)
    ratio = f'{seconds[2] / seconds[0]:.2f}x' if len(seconds) > 2 else '-'
    name = 'greedy' if beam == 1 else f'beam {beam}'
    print(f'{name:>24} {batch / seconds[0]:>12,.1f} '
          f'{batch * length / seconds[0]:>10,.0f} {seconds[0] * 1e3:>12,.0f} '
          f'{seconds[1] * 1e3:>15,.1f} {ratio:>12}')
    if len(seconds) > 2:
      print(f'{"flax examples/wmt " + name:>24} {batch / seconds[2]:>12,.1f} '
            f'{batch * length / seconds[2]:>10,.0f} '
            f'{seconds[2] * 1e3:>12,.0f} {"-":>15} {"-":>12}')


def gpt_rows(repeats: int) -> None:
  sizes = [s for s in _GPT_SIZES.value if s]
  if not sizes:
    return
  print(f'\nGPT sampling (temperature 1, top-k 40): prompt {_PROMPT.value} '
        f'tokens, {_NEW.value} new tokens, {_DTYPE.value}')
  header = (f'{"size":>24} {"batch":>6} {"tokens/s":>10} '
            f'{"ms per token":>13} {"first token ms":>15}')
  print(header)
  print('-' * len(header))
  for size in sizes:
    config = decoder.config_for(size, dropout_rate=0.0,
                                dtype=jnp.dtype(_DTYPE.value))
    params = timing.random_decoder_params(config)
    for batch in (int(b) for b in _GPT_BATCHES.value):
      first, per_token = timing.gpt_generation_seconds(
          config, params, batch=batch, prompt_length=_PROMPT.value,
          new_tokens=_NEW.value, repeats=repeats, top_k=40, greedy=False)
      print(f'{size:>24} {batch:>6} {batch / per_token:>10,.0f} '
            f'{per_token * 1e3:>13,.2f} {first * 1e3:>15,.1f}')


def main(argv):
  del argv
  print(f'device: {jax.devices()[0].device_kind}, jax {jax.__version__}; '
        f'medians of {_REPEATS.value} calls')
  mt_rows(_REPEATS.value)
  gpt_rows(_REPEATS.value)


if __name__ == '__main__':
  app.run(main)
