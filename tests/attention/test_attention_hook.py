"""The one attention hook of every model family (`layers.attention_weights`
over the weights each attention layer sows): it returns every layer that
attended, in the order the layers ran, and its weights are what the layer's
own parameters give, recomputed here from the inputs each layer received:
rows that sum to 1 over the keys the mask keeps, zero on padding and on
the future. The additive attention of the RNN and Show-Attend-Tell models
comes through the same hook, tested in test_rnn.py and test_captioning.py."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import attention
from transformer import layers
from transformer.core import masks
from transformer.models import captioning
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import vilbert
from transformer.models import vit

SOURCE = jnp.asarray([[3, 4, 5, 6, 1, 0, 0], [7, 8, 1, 0, 0, 0, 0]])
TARGET = jnp.asarray([[5, 6, 7, 1, 0], [9, 1, 0, 0, 0]])
LEFT_PADDED = jnp.asarray([[0, 0, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])
IMAGES = jax.random.uniform(jax.random.key(0), (2, 16, 16, 3), minval=-1,
                            maxval=1)


def _mt(**overrides):
  config = encoder_decoder.config_for(
      'tiny', vocab_size=20, max_length=16, dropout_rate=0.0, num_layers=2,
      **overrides)
  return encoder_decoder.Transformer(config), (SOURCE, TARGET), {}


def _gpt():
  config = decoder.config_for('tiny', vocab_size=20, max_length=16,
                              dropout_rate=0.0, num_layers=2, num_heads=4,
                              num_kv_heads=2)
  return (decoder.Decoder(config), (LEFT_PADDED,),
          {'key_mask': LEFT_PADDED > 0})


def _bert():
  config = encoder.config_for('tiny', vocab_size=20, max_length=16,
                              dropout_rate=0.0, num_layers=2)
  return encoder.Bert(config), (SOURCE,), {'method': 'encode'}


def _vit():
  config = vit.config_for('mu/4', num_classes=3, image_size=16,
                          dropout_rate=0.0)
  return vit.build(config), (IMAGES,), {}


def _captioner():
  config = captioning.config_for('tiny', model='transformer', encoder='vit',
                                 vocab_size=20, max_length=8, image_size=16,
                                 patch_size=4, dropout_rate=0.0)
  return captioning.build(config), (IMAGES, TARGET), {}


def _vilbert(architecture):
  config = vilbert.config_for('tiny', vocab_size=20, feature_dim=6,
                              architecture=architecture)
  rng = np.random.default_rng(0)
  corners = rng.uniform(0, 0.5, (2, 5, 2))
  boxes = np.concatenate([corners, corners + 0.4], -1)
  regions = np.ones((2, 5), bool)
  regions[0, 3:] = False  # padding regions
  args = (SOURCE, jnp.asarray(rng.normal(size=(2, 5, 6)), jnp.float32),
          jnp.asarray(boxes, jnp.float32), jnp.asarray(regions))
  return vilbert.build(config), args, {'method': 'encode'}


FAMILIES = {
    'mt_transformer': _mt,
    'mt_transformer_gqa': lambda: _mt(num_kv_heads=2),
    'gpt_gqa': _gpt,
    'bert': _bert,
    'vit': _vit,
    'transformer_captioner': _captioner,
    'vilbert_two_stream': lambda: _vilbert('two_stream'),
    'vilbert_single_stream': lambda: _vilbert('single_stream'),
}


@functools.lru_cache  # both tests read one run of each family
def _run(family):
  """The hook's weights and, per attention call, (path, its parameters,
  query inputs, key inputs, mask, causal)."""
  model, args, kwargs = FAMILIES[family]()
  # Initialised and applied under jit: eagerly every operation compiles on
  # its own (a second or more for a model).
  variables = nn.unbox(jax.jit(functools.partial(
      model.init, jax.random.key(1), deterministic=True, **kwargs))(*args))
  traced = {}  # found while tracing: the paths in hook order, call paths

  @jax.jit
  def apply(variables, *args):
    calls, inputs = [], []

    def record(next_fun, call_args, call_kwargs, context):
      if (isinstance(context.module, attention.MultiHeadAttention)
          and context.method_name == '__call__'):
        inputs_kv = (call_args[1] if len(call_args) > 1
                     else call_kwargs.get('inputs_kv'))
        calls.append((context.module.scope.path,
                      call_kwargs.get('causal', False)))
        inputs.append((call_args[0], inputs_kv, call_kwargs.get('mask')))
      return next_fun(*call_args, **call_kwargs)

    with nn.intercept_methods(record):
      _, state = model.apply(variables, *args, deterministic=True,
                             mutable=['intermediates'], **kwargs)
    # The hook runs here, on the intermediates as the layers sowed them: a
    # dict returned from jit comes back with its keys sorted, so the
    # weights leave as a list and the hook's order as trace-time data.
    weights = layers.attention_weights(state['intermediates'])
    traced.update(order=list(weights), calls=calls)
    return list(weights.values()), inputs

  weights, inputs = apply(variables, *args)
  calls = []
  for (path, causal), (inputs_q, inputs_kv, mask) in zip(traced['calls'],
                                                          inputs):
    params = variables['params']
    for name in path:
      params = params[name]
    calls.append(('/'.join(path), params, inputs_q, inputs_kv, mask, causal))
  return dict(zip(traced['order'], weights)), calls


def _recompute(params, inputs_q, inputs_kv, mask, causal):
  """softmax(Q K^T / sqrt(H)) per head from the layer's projections, in
  float64, kept keys only ([B, N, T, S], rows with no kept key all zero),
  and the keep mask."""
  x = np.asarray(inputs_q, np.float64)
  z = x if inputs_kv is None else np.asarray(inputs_kv, np.float64)

  def project(p, inputs):
    out = np.einsum('btd,dnh->btnh', inputs, np.asarray(p['kernel']))
    return out + np.asarray(p['bias']) if 'bias' in p else out

  query, key = project(params['query'], x), project(params['key'], z)
  # Grouped-query attention: query head n reads key head n // group.
  key = np.repeat(key, query.shape[2] // key.shape[2], axis=2)
  logits = np.einsum('btnh,bsnh->bnts', query, key) / np.sqrt(
      query.shape[-1])
  keep = np.ones(logits.shape, bool)
  if isinstance(mask, masks.KeyLengths):  # padding given as lengths
    mask = mask.mask(z.shape[1])
  if mask is not None:
    keep &= np.broadcast_to(np.asarray(mask), logits.shape)
  if causal:
    keep &= np.tril(np.ones(logits.shape[-2:], bool))
  logits = np.where(keep, logits, -np.inf)
  top = np.max(logits, -1, keepdims=True)
  exp = np.where(keep, np.exp(logits - np.where(np.isfinite(top), top, 0)),
                 0.0)
  total = exp.sum(-1, keepdims=True)
  return np.divide(exp, total, out=np.zeros_like(exp), where=total > 0), keep


@pytest.mark.parametrize('family', FAMILIES)
def test_every_layer_is_returned_in_the_order_it_ran(family):
  weights, calls = _run(family)
  assert list(weights) == [path for path, *_ in calls]
  assert len(calls) >= 2


@pytest.mark.parametrize('family', FAMILIES)
def test_weights_are_the_layers_own_softmax_over_kept_keys(family):
  weights, calls = _run(family)
  padded = 0
  for path, params, inputs_q, inputs_kv, mask, causal in calls:
    expected, keep = _recompute(params, inputs_q, inputs_kv, mask, causal)
    got = np.asarray(weights[path], np.float64)
    assert got.shape == expected.shape, path
    np.testing.assert_allclose(got, expected, atol=2e-6, err_msg=path)
    # Each query with a key to read spreads exactly 1 over the kept keys
    # and nothing on padding or the future.
    rows = keep.any(-1)
    np.testing.assert_allclose(got.sum(-1)[rows], 1.0, atol=1e-5,
                               err_msg=path)
    assert (got[~keep] == 0).all(), path
    padded += (~keep).sum()
  # Every family but ViT (all patches real) has padding or the future to
  # hide, so the zero check above has something to check.
  assert bool(padded) == (family != 'vit')
