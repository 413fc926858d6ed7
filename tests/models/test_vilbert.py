"""ViLBERT: co-attention's properties, the parameter count against the
closed form, and a BERT text stream that stays BERT without regions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import layers
from transformer.core import masks
from transformer.models import encoder
from transformer.models import vilbert


def inputs(config, batch=2, length=7, regions=5, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, config.vocab_size, (batch, length))
  tokens[1, 4:] = 0  # padding words
  corners = rng.uniform(0, 0.5, (batch, regions, 2))
  boxes = np.concatenate([corners, corners + rng.uniform(
      0.1, 0.5, (batch, regions, 2))], -1)
  mask = np.ones((batch, regions), bool)
  mask[0, 3:] = False  # padding regions
  return (jnp.asarray(tokens, jnp.int32),
          jnp.asarray(rng.normal(size=(batch, regions, config.feature_dim)),
                      jnp.float32),
          jnp.asarray(boxes, jnp.float32), jnp.asarray(mask))


@pytest.fixture(scope='module', params=vilbert.ARCHITECTURES)
def tiny(request):
  config = vilbert.config_for('tiny', vocab_size=50, feature_dim=12,
                              num_region_classes=7, answer_classes=5,
                              architecture=request.param)
  model = vilbert.build(config)
  args = inputs(config)
  params = model.init(jax.random.key(0), *args, deterministic=True,
                      method='pretraining_logits')['params']
  return config, model, params, args


def encode(model, params, args, **kwargs):
  return model.apply({'params': params}, *args, deterministic=True,
                     method='encode', **kwargs)


def closed_form(c):
  """Parameters of `encode` counted by hand from the sizes."""
  dense = lambda n_in, n_out: n_in * n_out + n_out
  norm = lambda d: 2 * d
  attention = lambda d_q, d_kv, inner, d_out: (
      dense(d_q, inner) + 2 * dense(d_kv, inner) + dense(inner, d_out))
  block = lambda d, ff: (attention(d, d, d, d) + norm(d) + dense(d, ff)
                         + dense(ff, d) + norm(d))
  text = (c.vocab_size + c.max_length + c.type_vocab_size) * c.d_model \
      + norm(c.d_model) + c.num_layers * block(c.d_model, c.d_ff)
  visual = dense(c.feature_dim, c.v_d_model) + dense(5, c.v_d_model) \
      + norm(c.v_d_model) + c.v_num_layers * block(c.v_d_model, c.v_d_ff)
  co = (attention(c.d_model, c.v_d_model, c.co_d_model, c.d_model)
        + attention(c.v_d_model, c.d_model, c.co_d_model, c.v_d_model)
        + dense(c.d_model, c.d_ff) + dense(c.d_ff, c.d_model)
        + dense(c.v_d_model, c.v_d_ff) + dense(c.v_d_ff, c.v_d_model)
        + 2 * norm(c.d_model) + 2 * norm(c.v_d_model))
  poolers = dense(c.d_model, c.co_d_model) + dense(c.v_d_model, c.co_d_model)
  return text + visual + len(c.text_co_layers) * co + poolers


def test_single_stream_count_is_the_closed_form():
  c = vilbert.config_for('small', architecture='single_stream')
  dense = lambda n_in, n_out: n_in * n_out + n_out
  text = (c.vocab_size + c.max_length + c.type_vocab_size) * c.d_model \
      + 2 * c.d_model + c.num_layers * (
          4 * dense(c.d_model, c.d_model) + dense(c.d_model, c.d_ff)
          + dense(c.d_ff, c.d_model) + 4 * c.d_model)
  regions = dense(c.feature_dim, c.d_model) + dense(5, c.d_model) \
      + 2 * c.d_model
  poolers = 2 * dense(c.d_model, c.co_d_model)
  assert vilbert.param_count(c) == text + regions + poolers


@pytest.mark.parametrize('size', ['tiny', 'small', 'vilbert'])
def test_parameter_count_is_the_closed_form(size):
  config = vilbert.config_for(size)
  assert vilbert.param_count(config) == closed_form(config)
  if size == 'vilbert':
    # The reference implementation's layers (bert_base_6layer_6conect),
    # without the 11,020,800 weights of its unused q_dense layers.
    assert vilbert.param_count(config) == 235_705_856


def test_reordering_regions_reorders_visual_outputs_only(tiny):
  config, model, params, (tokens, features, boxes, mask) = tiny
  text, visual, joint = encode(model, params, (tokens, features, boxes, mask))
  order = np.array([4, 2, 0, 3, 1])
  text2, visual2, joint2 = encode(
      model, params, (tokens, features[:, order], boxes[:, order],
                      mask[:, order]))
  np.testing.assert_allclose(text2, text, atol=1e-5)
  np.testing.assert_allclose(joint2, joint, atol=1e-5)
  np.testing.assert_allclose(visual2[:, 0], visual[:, 0], atol=1e-5)  # IMG
  np.testing.assert_allclose(visual2[:, 1:], visual[:, 1:][:, order],
                             atol=1e-5)
  # Boxes are the regions' only position: moving one changes the outputs.
  moved = boxes.at[1, 0].set(jnp.array([0.6, 0.6, 0.9, 0.9]))
  text3, _, _ = encode(model, params, (tokens, features, moved, mask))
  assert not np.allclose(text3[1], text[1], atol=1e-4)
  np.testing.assert_allclose(text3[0], text[0], atol=1e-5)


def test_padding_words_and_regions_get_no_attention(tiny):
  config, model, params, (tokens, features, boxes, mask) = tiny
  (text, visual, joint), state = model.apply(
      {'params': params}, tokens, features, boxes, mask, deterministic=True,
      method='encode', mutable=['intermediates'])
  words, regions = vilbert.co_attention(model, params, tokens, features,
                                        boxes, mask)
  assert np.all(np.asarray(words[0])[..., 3:] == 0)  # padding regions
  assert np.all(np.asarray(regions[1])[..., 4:] == 0)  # padding words
  assert np.asarray(words[0])[..., :3].min() > 0
  if config.architecture == 'two_stream':
    weights = layers.attention_weights(state['intermediates'])
    co = {k: v for k, v in weights.items() if 'attends_to_other' in k}
    assert len(co) == 2 * len(config.text_co_layers)
    assert words.shape[1] == len(config.text_co_layers)
    # A word's co-attention is over the IMG token and the real regions.
    np.testing.assert_allclose(
        np.asarray(co['co_layers_0/text_attends_to_other'][0]).sum(-1), 1,
        rtol=1e-5)
  # What padding holds does not matter.
  features2 = features.at[0, 3:].set(100.0)
  tokens2 = tokens.at[1, 4:].set(0)
  out2 = encode(model, params, (tokens2, features2, boxes, mask))
  np.testing.assert_allclose(out2[0], text, atol=1e-5)
  np.testing.assert_allclose(out2[1][0, :4], visual[0, :4], atol=1e-5)


def test_text_depends_on_the_image_through_co_attention(tiny):
  _, model, params, (tokens, features, boxes, mask) = tiny
  grad = jax.jit(jax.grad(lambda f: encode(
      model, params, (tokens, f, boxes, mask))[0][:, 1:].sum()))(features)
  grad = np.abs(np.asarray(grad)).sum(-1)
  assert np.all(grad[np.asarray(mask)] > 0)
  assert np.all(grad[~np.asarray(mask)] == 0)


def test_a_bert_text_stream_is_bert_without_regions(tiny):
  config, model, params, (tokens, features, boxes, mask) = tiny
  bert = encoder.Bert(config.text())
  bert_params = bert.init(jax.random.key(3), tokens, deterministic=True,
                          method='mlm_logits')['params']
  loaded = vilbert.from_bert(bert_params, params)
  states, _ = bert.apply({'params': bert_params}, tokens, deterministic=True,
                         method='encode')
  no_regions = jnp.zeros_like(mask)
  text, _, _ = encode(model, loaded, (tokens, features, boxes, no_regions))
  np.testing.assert_allclose(text, states, atol=1e-5)
  # With regions, co-attention changes the text.
  text, _, _ = encode(model, loaded, (tokens, features, boxes, mask))
  assert not np.allclose(text, states, atol=1e-3)
  # Mismatched BERTs, from their shapes alone (`from_bert` reads no values;
  # an eager `init` would compile every initialiser).
  deeper = encoder.Bert(config.text().replace(num_layers=3))
  with raises_naming(ValueError, '3 layers', 'text_layers_2', 'num_layers'):
    jax.eval_shape(lambda: vilbert.from_bert(deeper.init(
        jax.random.key(0), tokens, deterministic=True,
        method='encode')['params'], params))
  wider = encoder.Bert(config.text().replace(d_model=64))
  with raises_naming(ValueError, 'embed', '(50, 64)', '(50, 32)', 'd_model'):
    jax.eval_shape(lambda: vilbert.from_bert(wider.init(
        jax.random.key(0), tokens, deterministic=True,
        method='encode')['params'], params))


def test_heads_shapes_and_padding(tiny):
  config, model, params, args = tiny
  apply = lambda method, **kw: model.apply(
      {'params': params}, *args, deterministic=True, method=method, **kw)
  out = apply('pretraining_logits')
  assert out['words'].shape == (2, 7, 50)
  assert out['regions'].shape == (2, 5, 7) and out['aligned'].shape == (2,)
  answer_params = model.init(jax.random.key(1), *args, deterministic=True,
                             method='answer_logits')['params']
  assert model.apply({'params': answer_params}, *args, deterministic=True,
                     method='answer_logits').shape == (2, 5)
  score_params = model.init(jax.random.key(1), *args, deterministic=True,
                            method='region_scores')['params']
  scores = model.apply({'params': score_params}, *args, deterministic=True,
                       method='region_scores')
  assert np.all(np.asarray(scores[0, 3:]) == masks.MASKED_LOGIT)


def test_config_errors():
  with raises_naming(ValueError, 'text_co_layers=(1,)',
                     'visual_co_layers=(0, 1)', 'same number'):
    vilbert.config_for('tiny', text_co_layers=(1,))
  with raises_naming(ValueError, 'text_co_layers=(2, 1)', 'non-decreasing'):
    vilbert.config_for('tiny', text_co_layers=(2, 1))
  with raises_naming(ValueError, 'visual_co_layers=(0, 3)',
                     'stream depth 2'):
    vilbert.config_for('tiny', visual_co_layers=(0, 3))
  with raises_naming(ValueError, 'co_d_model=50', 'co_num_heads=4'):
    vilbert.config_for('tiny', co_d_model=50)
  with raises_naming(ValueError, 'v_num_layers=0', '>= 1'):
    vilbert.config_for('tiny', v_num_layers=0)
  with raises_naming(ValueError, "ViLBERT size 'huge'", "'vilbert'"):
    vilbert.config_for('huge')
