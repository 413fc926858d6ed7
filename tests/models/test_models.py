"""The encoder-decoder Transformer: sizes, parameter counts, masking."""

import functools
import importlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
import conftest
from transformer import layers
from transformer.models import encoder_decoder as ed


def closed_form(config: ed.Config) -> int:
  """The architecture's count: shared embedding, post-LN layers with biases."""
  d, f, v = config.d_model, config.mlp_dim, config.vocab_size
  attention = 4 * (d * d + d)  # W_Q, W_K, W_V, W_O and biases
  ffn = d * f + f + f * d + d
  norm = 2 * d
  encoder_layer = attention + ffn + 2 * norm
  decoder_layer = 2 * attention + ffn + 3 * norm
  total = v * d + config.num_layers * (encoder_layer + decoder_layer)
  if config.positional_encoding == 'learned':
    total += 2 * config.max_length * d
  if not config.tie_embeddings:
    total += d * v
  return total


@pytest.mark.parametrize('size,expected,paper', [
    ('base', 63_082_496, 65e6),
    ('big', 214_245_376, 213e6),
])
def test_paper_sizes_match_the_closed_form(size, expected, paper):
  # Table 3's counts assume the paper's 37,000-token shared vocabulary.
  config = ed.config_for(size, vocab_size=37_000)
  assert ed.param_count(config) == closed_form(config) == expected
  assert abs(expected - paper) / paper < 0.03


def test_options_change_the_count_as_the_formula_says():
  base = ed.config_for('tiny', vocab_size=100, max_length=16)
  for config in (base, base.replace(positional_encoding='learned'),
                 base.replace(tie_embeddings=False)):
    assert ed.param_count(config) == closed_form(config)
  assert ed.config_for('base').dropout_rate == 0.1
  assert ed.config_for('big').dropout_rate == 0.3
  assert (ed.config_for('big').d_model, ed.config_for('big').num_heads) == (
      1024, 16)
  with raises_naming(ValueError, "Transformer size 'huge'", "'base'"):
    ed.config_for('huge')


def test_shift_right_restarts_at_each_segment():
  targets = jnp.asarray([[5, 6, 1, 7, 1, 0]])
  segments = jnp.asarray([[1, 1, 1, 2, 2, 0]])
  np.testing.assert_array_equal(layers.shift_right(targets),
                                [[0, 5, 6, 1, 7, 1]])
  np.testing.assert_array_equal(layers.shift_right(targets, segments),
                                [[0, 5, 6, 0, 7, 0]])


# Tracing and compiling dominate these tests, not arithmetic: each tiny
# model is initialised once per process (tests only read the parameters;
# arrays are immutable), `init` and `apply` run compiled (from the
# persistent cache, a third of an eager call's time), and the masking tests
# share their examples, so that each shape's program is compiled once.
@functools.lru_cache(maxsize=None)
def tiny_model(positions='sinusoidal'):
  config = ed.config_for('tiny', vocab_size=20, max_length=16,
                         dropout_rate=0.0, positional_encoding=positions)
  model = ed.Transformer(config)
  tokens = jnp.ones((1, 10), jnp.int32)
  return model, jax.jit(functools.partial(model.init, deterministic=True))(
      jax.random.key(0), tokens, tokens)


apply = conftest.jit_apply()


# Two examples: their sources and targets of different lengths.
A_SRC, A_TGT = [3, 4, 5, 1], [6, 7, 1]
B_SRC, B_TGT = [8, 9, 1], [10, 11, 12, 1]


@pytest.mark.parametrize('positions', ['sinusoidal', 'rotary'])
def test_packed_rows_equal_separate_examples(positions):
  """Attention never crosses segments: a packed row gives each example the
  logits it gets alone."""
  model, params = tiny_model(positions)
  a_src, a_tgt, b_src, b_tgt = A_SRC, A_TGT, B_SRC, B_TGT
  pad = lambda x, n: x + [0] * (n - len(x))
  row = lambda a, b: jnp.asarray([pad(a + b, 10)])
  inputs, targets = row(a_src, b_src), row(a_tgt, b_tgt)
  seg = lambda a, b: jnp.asarray([pad([1] * len(a) + [2] * len(b), 10)])
  pos = lambda a, b: jnp.asarray([pad(list(range(len(a))) +
                                      list(range(len(b))), 10)])
  packed = apply(model, params, inputs, targets,
                 inputs_segmentation=seg(a_src, b_src),
                 targets_segmentation=seg(a_tgt, b_tgt),
                 inputs_positions=pos(a_src, b_src),
                 targets_positions=pos(a_tgt, b_tgt),
                 deterministic=True)
  for src, tgt, start in ((a_src, a_tgt, 0), (b_src, b_tgt, len(a_tgt))):
    alone = apply(model, params, jnp.asarray([src]), jnp.asarray([tgt]),
                  deterministic=True)
    np.testing.assert_allclose(packed[0, start:start + len(tgt)], alone[0],
                               rtol=1e-5, atol=1e-5)


def test_padded_rows_equal_examples_alone():
  """Unpacked rows (padding given to attention as key lengths): padding
  changes no logit of a real target token."""
  model, params = tiny_model()
  examples = [(A_SRC, A_TGT), (B_SRC, B_TGT)]
  pad = lambda x: x + [0] * (10 - len(x))
  inputs = jnp.asarray([pad(src) for src, _ in examples])
  targets = jnp.asarray([pad(tgt) for _, tgt in examples])
  padded = apply(model, params, inputs, targets, deterministic=True)
  for row, (src, tgt) in enumerate(examples):
    alone = apply(model, params, jnp.asarray([src]), jnp.asarray([tgt]),
                  deterministic=True)
    np.testing.assert_allclose(padded[row, :len(tgt)], alone[0], rtol=1e-5,
                               atol=1e-5)


def test_final_logits_bias_and_unscaled_embeddings_are_what_they_say():
  tokens = jnp.asarray([[3, 4, 5, 1]])
  config = ed.config_for('tiny', vocab_size=11, dropout_rate=0.0,
                         final_logits_bias=True)
  model = ed.Transformer(config)
  params = nn.unbox(jax.jit(functools.partial(
      model.init, deterministic=True))(jax.random.key(0), tokens,
                                       tokens)['params'])
  assert params['final_logits_bias'].shape == (11,)
  bias = jnp.arange(11.0)
  logits = lambda p, m=model: apply(m, {'params': p}, tokens, tokens,
                                    deterministic=True)
  np.testing.assert_allclose(
      logits({**params, 'final_logits_bias': bias}) - logits(params),
      jnp.broadcast_to(bias, (1, 4, 11)), atol=1e-5)
  # Without the sqrt(D) scale, a table sqrt(D) times larger encodes alike.
  unscaled = ed.Transformer(config.replace(scale_embeddings=False))
  table = params['embed']['embed']['embedding']
  larger = {**params, 'embed': {'embed': {'embedding': table *
                                          config.d_model**0.5}}}
  encode = lambda p, m: apply(m, {'params': p}, tokens, deterministic=True,
                              method='encode')
  np.testing.assert_allclose(encode(larger, unscaled), encode(params, model),
                             atol=1e-5)
  assert not np.allclose(encode(params, unscaled), encode(params, model),
                         atol=1e-3)


def test_every_model_module_is_a_model_family():
  import pkgutil  # pylint: disable=g-import-not-at-top
  from transformer import models  # pylint: disable=g-import-not-at-top
  from transformer.models import family  # pylint: disable=g-import-not-at-top
  names = [m.name for m in pkgutil.iter_modules(models.__path__)
           if m.name != 'family']
  assert len(names) == 8, names
  for name in names:
    module = importlib.import_module(f'transformer.models.{name}')
    assert isinstance(module, family.ModelFamily), name
    if name != 'vit':  # its sizes are VARIANT/PATCH, tested in test_vit
      with raises_naming(ValueError, "size 'nope'", "'tiny'"):
        module.config_for('nope')
  assert not isinstance(layers, family.ModelFamily)  # can fail


def test_every_translation_family_decodes_through_the_interface():
  from transformer.models import captioning  # pylint: disable=g-import-not-at-top
  from transformer.models import decoder  # pylint: disable=g-import-not-at-top
  from transformer.models import family  # pylint: disable=g-import-not-at-top
  from transformer.tasks import translation  # pylint: disable=g-import-not-at-top
  for name, module in [*translation.FAMILIES.items(),
                       ('captioning', captioning)]:
    assert isinstance(module, family.DecodingFamily), name
    config = module.config_for(next(iter(module.SIZES)), vocab_size=11,
                               max_length=7)
    assert (config.vocab_size, config.max_length) == (11, 7), name
  # The GPT decoder decodes through the language-modelling task's cache.
  assert not isinstance(decoder, family.DecodingFamily)  # can fail
