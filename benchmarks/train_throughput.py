"""Train-step throughput and model FLOP utilisation.

    python benchmarks/train_throughput.py --sizes=mini,small,base,gpt2,Ti/16,B/16
    python benchmarks/train_throughput.py --rows=64 --length=256 \
        --sizes=base,big,gpt2,gpt2-medium,gpt2-large,gpt2-xl   # on a GPU
    python benchmarks/train_throughput.py --rows=256 --sizes=S/16,B/16  # GPU
    python benchmarks/train_throughput.py --rows=8 --length=2048 \
        --sizes=gpt2-large,gpt2-xl                        # GPU: ~1B GPTs

Times the real jitted `train.train_step` (Adam, dropout) on synthetic
batches: translation models of `encoder_decoder` (label-smoothed loss) and
GPT models of `decoder` (next-token loss) on fully packed rows of L tokens,
and ViTs ('B/16': `vit` names) on `--rows` images of `--image_size`
(1,000-way softmax; the on-device augmentation is not timed), chosen by
size name.

Model FLOPs per step come from `flops.model_flops`, one formula for every
model: 6 x parameters x tokens plus 12 x layers x length x d_model per
token for each attention, halved for causal self-attention (GPT's, the
translation decoder's); translation counts the encoder's and the decoder's
self-attention and the cross-attention, each side's tokens passing through
its half of the model; a ViT's tokens are its patches and class token, its
classifier sees one vector per image. XLA's own count of the compiled step
is printed beside it. Model FLOP utilisation (MFU) is given twice: against
the device's datasheet peak at the computation dtype (`devices`; "n/a"
where none is listed, e.g. on a CPU) and against a square matmul timed in
the same run at the same dtype.
"""

import functools

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

import devices
import flops
import timing
from transformer import attention
from transformer import configs
from transformer import optimizers
from transformer import train
from transformer.models import decoder
from transformer.models import encoder_decoder
from transformer.models import vit
from transformer.tasks import language_modeling
from transformer.tasks import translation

_SIZES = flags.DEFINE_list('sizes', ['base'], 'Named model sizes.')
_ROWS = flags.DEFINE_integer('rows', None, 'Rows per batch; default 4 on '
                             'CPU, 96 on GPU (~25k tokens per side at 256).')
_LENGTH = flags.DEFINE_integer('length', 128, 'Row length L.')
_VOCAB = flags.DEFINE_integer('vocab', 37_000, 'Translation vocabulary size '
                              '(GPT sizes keep their own).')
_DTYPE = flags.DEFINE_string('dtype', None, 'Computation dtype; default '
                             'float32 on CPU, bfloat16 on GPU.')
_STEPS = flags.DEFINE_integer('steps', 5, 'Timed steps, run back to back '
                              '(timing.steady_step_seconds).')
_IMAGE_SIZE = flags.DEFINE_integer('image_size', 224, 'ViT input side.')
_ATTENTION = flags.DEFINE_enum('attention', 'auto',
                               list(attention.IMPLEMENTATIONS),
                               "Attention kernel; 'auto' takes cuDNN on a GPU "
                               'where it can.')
_REMAT = flags.DEFINE_string('remat', 'none', 'Remat policy of every block '
                             '(layers.REMAT_POLICIES).')
_SCAN = flags.DEFINE_bool('scan_layers', False, 'Scan over the blocks '
                          '(compiles one block, not every one: a 36-layer '
                          'GPT compiles in a fraction of the time).')
_DROPOUT = flags.DEFINE_float('dropout', None, 'Dropout rate of every '
                              'model; default each size\'s own (GPT-2 sizes '
                              '0.1, base 0.1, ViT 0).')
_PRNG = flags.DEFINE_enum('prng_impl', 'threefry2x32',
                          ['threefry2x32', 'rbg', 'unsafe_rbg'],
                          "jax's default PRNG, which draws dropout's bits.")
_PAD_TOKENS = flags.DEFINE_integer('pad_tokens_to', 1, 'ViT: pad the tokens '
                                   'to a multiple of this (8 lets cuDNN take '
                                   "B/16's 197).")
_PACKING = flags.DEFINE_enum(
    'packing', 'packed', ['packed', 'unpacked'],
    'Translation rows: four examples per row with segment ids, or one '
    'full-length example per row (no segment ids: padding masks only).')


def vit_loss(model, params, batch, rng, *, deterministic):
  logits = model.apply({'params': params}, batch['images'],
                       deterministic=deterministic,
                       rngs=None if rng is None else {'dropout': rng})
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits, batch['labels']).mean()
  return loss, {'loss': (loss, 1.0)}


def count(tree) -> int:
  return sum(x.size for x in jax.tree.leaves(tree))


def setup(size: str, rows: int, length: int, dtype):
  """(loss function, batch, init, tokens per row, FLOPs per step given the
  parameters) of a size."""
  options = dict(dtype=dtype, attention_implementation=_ATTENTION.value,
                 remat=_REMAT.value, scan_layers=_SCAN.value)
  if _DROPOUT.value is not None:
    options['dropout_rate'] = _DROPOUT.value
  if _PACKING.value == 'unpacked' and ('/' in size or size in decoder.SIZES):
    mt = [s for s in encoder_decoder.SIZES if s not in decoder.SIZES]
    raise app.UsageError(f'--packing=unpacked is for translation sizes '
                         f'({", ".join(mt)}); {size!r} is not one.')
  if '/' in size:
    config = vit.config_for(size, image_size=_IMAGE_SIZE.value,
                            pad_tokens_to=_PAD_TOKENS.value, **options)
    model = vit.VisionTransformer(config)
    rng = np.random.default_rng(0)
    batch = {'images': rng.uniform(-1, 1, (rows, config.image_size,
                                           config.image_size, 3)).astype(
                                               np.float32),
             'labels': rng.integers(0, 1000, rows).astype(np.int32)}
    init = lambda r: model.init(r, batch['images'][:1], deterministic=True)
    step_flops = lambda params: flops.vit_flops(
        count(params), count(params['head']), images=rows,
        tokens=config.num_tokens, num_layers=config.num_layers,
        d_model=config.d_model)
    return (functools.partial(vit_loss, model), batch, init,
            config.num_tokens, step_flops)
  if size in decoder.SIZES:
    config = decoder.config_for(size, max_length=max(
        length, decoder.SIZES[size].get('max_length', 0)), **options)
    model = decoder.Decoder(config)
    loss_fn = functools.partial(language_modeling.lm_loss, model,
                                label_smoothing=0.0)
    batch = synthetic_batch(rows, length, config.vocab_size)
    batch = {k: batch[k] for k in ('inputs', 'targets',
                                   'inputs_segmentation', 'inputs_position')}
    init = lambda r: model.init(r, batch['inputs'][:1], deterministic=True)
    step_flops = lambda params: flops.decoder_flops(
        count(params), rows=rows, length=length,
        num_layers=config.num_layers, d_model=config.d_model)
    return loss_fn, batch, init, length, step_flops
  config = encoder_decoder.config_for(size, vocab_size=_VOCAB.value,
                                      max_length=length, **options)
  model = encoder_decoder.Transformer(config)
  loss_fn = functools.partial(translation.translation_loss, model,
                              label_smoothing=0.1)
  batch = synthetic_batch(rows, length, _VOCAB.value)
  if _PACKING.value == 'unpacked':
    batch = {k: batch[k] for k in ('inputs', 'targets')}
  init = lambda r: model.init(r, batch['inputs'][:1], batch['targets'][:1],
                              deterministic=True)
  step_flops = lambda params: flops.translation_flops(
      count(params), rows=rows, length=length, num_layers=config.num_layers,
      d_model=config.d_model)
  return loss_fn, batch, init, length, step_flops


def synthetic_batch(rows: int, length: int, vocab: int) -> dict:
  rng = np.random.default_rng(0)
  # Four packed examples per row, so segment masks are exercised.
  segments = np.repeat(np.arange(1, 5), length // 4)[None].repeat(rows, 0)
  positions = np.tile(np.arange(length // 4), 4)[None].repeat(rows, 0)
  tokens = lambda: rng.integers(3, vocab, (rows, length)).astype(np.int32)
  return {'inputs': tokens(), 'targets': tokens(),
          'inputs_segmentation': segments, 'targets_segmentation': segments,
          'inputs_position': positions, 'targets_position': positions}


def shape_flags() -> tuple[int, int, jnp.dtype]:
  """(rows, length, dtype) from the flags, with the device's defaults."""
  gpu = jax.default_backend() == 'gpu'
  return (_ROWS.value or (96 if gpu else 4), _LENGTH.value,
          jnp.dtype(_DTYPE.value or ('bfloat16' if gpu else 'float32')))


def compiled_step(size: str, rows: int, length: int, dtype):
  """(the compiled train step, its state and batch, parameters, tokens per
  row, FLOPs per step) of a size, with the default experiment's optimizer."""
  jax.config.update('jax_default_prng_impl', _PRNG.value)
  optimizer = ml_collections.ConfigDict(configs.default_config().optimizer)
  tx, _ = optimizers.build(optimizer, num_steps=100_000)
  loss_fn, batch, init, tokens, step_flops = setup(size, rows, length, dtype)
  params = jax.jit(lambda r: nn.unbox(init(r)['params']))(jax.random.key(0))
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                           opt_state=tx.init(params))
  step = jax.jit(timing.default_train_step(loss_fn=loss_fn, tx=tx, seed=0))
  return (step.lower(state, batch).compile(), state, batch, params, tokens,
          step_flops(params))


def describe(rows: int, length: int, dtype) -> str:
  """The device and the flags a table's rows were measured with."""
  dropout = ("each size's" if _DROPOUT.value is None else _DROPOUT.value)
  return (f'device: {jax.devices()[0].device_kind}, jax {jax.__version__}, '
          f'{dtype.name}, attention {_ATTENTION.value}, remat '
          f'{_REMAT.value}, scan_layers {_SCAN.value}, {_PACKING.value} '
          f'rows, dropout {dropout}, '
          f'prng {_PRNG.value}, ViT tokens padded to a multiple of '
          f'{_PAD_TOKENS.value}, {rows} rows x {length} tokens per side (ViT: {rows} '
          f'images of {_IMAGE_SIZE.value})')


def print_header():
  header = (f'{"size":>12} {"params":>14} {"step ms":>9} {"tokens/s":>10} '
            f'{"images/s":>9} {"model TFLOP/s":>14} {"XLA TFLOP/s":>12} '
            f'{"MFU datasheet":>14} {"MFU matmul":>11}')
  print(header)
  print('-' * len(header))


def main(argv):
  del argv
  gpu = jax.default_backend() == 'gpu'
  rows, length, dtype = shape_flags()
  kind = jax.devices()[0].device_kind
  datasheet = devices.peak_flops(kind, dtype)
  matmul = timing.matmul_flops_per_second(8192 if gpu else 2048, dtype,
                                          _STEPS.value, chain=10 if gpu else 1)
  sheet = ('n/a (not in benchmarks/devices.py)' if datasheet is None
           else f'{datasheet / 1e12:.1f} TFLOP/s')
  print(f'{describe(rows, length, dtype)}; datasheet peak {sheet}; square '
        f'matmul measured {matmul / 1e12:.3f} TFLOP/s')
  print_header()
  for size in _SIZES.value:
    try:
      print(measure(size, rows, length, dtype, datasheet, matmul),
            flush=True)
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      # One size too large for the device must not hide the others' rows.
      print(f'{size:>12} out of device memory at {rows} rows x {length} '
            f'(try --remat=full or fewer --rows)', flush=True)


def measure(size, rows, length, dtype, datasheet, matmul) -> str:
  """One table row: the step time of `size` and what follows."""
  return row(size, rows, compiled_step(size, rows, length, dtype), datasheet,
             matmul)


def row(size, rows, compiled_step_result, datasheet, matmul) -> str:
  """The table row of a `compiled_step` result, its steps timed."""
  compiled, state, batch, params, tokens, step_flops = compiled_step_result
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  xla_flops = float(cost.get('flops', float('nan'))) if cost else np.nan
  seconds = timing.steady_step_seconds(compiled, state, batch,
                                       steps=_STEPS.value)
  achieved = step_flops / seconds
  images = f'{rows / seconds:>9,.1f}' if '/' in size else f'{"":>9}'
  return (f'{size:>12} {count(params):>14,} '
          f'{seconds * 1e3:>9.1f} {rows * tokens / seconds:>10,.0f} '
          f'{images} {achieved / 1e12:>14.3f} '
          f'{xla_flops / seconds / 1e12:>12.3f} '
          f'{timing.percent(achieved, datasheet):>14} '
          f'{timing.percent(achieved, matmul):>11}')

if __name__ == '__main__':
  app.run(main)
