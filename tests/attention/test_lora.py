"""Low-rank adapters (LoRA) on the attention projections: a model starts
as its base model, merging gives the adapted model's logits, the
trainable count is the formula's, and bad settings are refused by name."""

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer.attention import lora
from transformer.models import decoder

BASE = decoder.config_for('tiny', vocab_size=20, max_length=8,
                          num_kv_heads=2)
TOKENS = jnp.asarray([[1, 2, 3, 4, 5], [6, 7, 8, 9, 1]])


def _init(config):
  return nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), TOKENS, deterministic=True)['params'])


def _apply(config, params):
  return decoder.Decoder(config).apply({'params': params}, TOKENS,
                                       deterministic=True)


def _with_random_b(params):
  """Adapters as training leaves them: B no longer zero."""
  rng = np.random.default_rng(0)
  flat = traverse_util.flatten_dict(params)
  return traverse_util.unflatten_dict(
      {k: rng.normal(size=v.shape).astype(np.float32) * 0.1
       if k[-1] == lora.B else v for k, v in flat.items()})


@pytest.mark.parametrize('scan', [False, True])
def test_adapters_start_at_zero_and_merge_into_the_same_model(scan):
  config = BASE.replace(lora_rank=3, lora_alpha=6.0, scan_layers=scan,
                        lora_targets='query,key,value,out')
  base = BASE.replace(scan_layers=scan)
  params = _init(config)
  # B = 0: the adapted model is the base model with the same weights.
  np.testing.assert_array_equal(
      _apply(config, params), _apply(base, lora.merged(params, config.lora)))
  trained = _with_random_b(params)
  adapted = _apply(config, trained)
  assert np.abs(adapted - _apply(config, params)).max() > 1e-2
  np.testing.assert_allclose(
      _apply(base, lora.merged(trained, config.lora)), adapted, atol=1e-5)


@pytest.mark.parametrize('targets', ['query,value', 'query,key,value,out'])
def test_the_trainable_count_is_the_formula(targets):
  """Rank r on a projection of `in` inputs and `out` outputs adds
  r (in + out): query D -> N H, key and value D -> K H, out N H -> D."""
  r = 4
  config = BASE.replace(lora_rank=r, lora_targets=targets)
  flat = traverse_util.flatten_dict(_init(config))
  count = sum(v.size for k, v in flat.items() if lora.is_adapter(k))
  d, n, k = config.d_model, config.num_heads, config.num_kv_heads
  h = d // n
  sizes = {'query': d + n * h, 'key': d + k * h, 'value': d + k * h,
           'out': n * h + d}
  assert count == config.num_layers * sum(
      r * sizes[t] for t in targets.split(','))
  assert set(traverse_util.flatten_dict(_init(BASE))) == {
      key for key in flat if not lora.is_adapter(key)}


def test_adapter_dropout_draws_only_while_training():
  config = BASE.replace(lora_rank=2, lora_dropout=0.5)
  params = _with_random_b(_init(config))
  model = decoder.Decoder(config)
  train = lambda seed: model.apply(
      {'params': params}, TOKENS, deterministic=False,
      rngs={'dropout': jax.random.key(seed)})
  assert np.abs(train(0) - train(1)).max() > 0
  np.testing.assert_array_equal(_apply(config, params), _apply(config, params))


@pytest.mark.parametrize('fields, named', [
    (dict(lora_rank=-1), ('model.lora_rank=-1', '[1, d_model=32]')),
    (dict(lora_rank=33), ('model.lora_rank=33', '[1, d_model=32]')),
    (dict(lora_rank=2, lora_alpha=0.0), ('model.lora_alpha=0.0',)),
    (dict(lora_rank=2, lora_dropout=1.0), ('model.lora_dropout=1.0',)),
    (dict(lora_rank=2, lora_targets='query,mlp'),
     ("model.lora_targets='query,mlp'", "['mlp']", 'query, key, value, out')),
    (dict(lora_rank=2, lora_targets=''), ("model.lora_targets=''",)),
])
def test_bad_settings_are_refused_by_name(fields, named):
  with raises_naming(ValueError, *named):
    BASE.replace(**fields)


def test_a_checkpoint_of_adapters_goes_back_onto_its_base():
  """`adapters` keeps what a LoRA checkpoint holds; `with_adapters` puts it
  back onto a base tree, and refuses adapters of another rank or set."""
  config = BASE.replace(lora_rank=2)
  trained = _with_random_b(_init(config))
  saved = lora.adapters(trained)
  flat = traverse_util.flatten_dict(saved)
  assert flat and all(lora.is_adapter(k) for k in flat)
  fresh = _init(config)
  back = traverse_util.flatten_dict(lora.with_adapters(fresh, saved))
  for key, value in traverse_util.flatten_dict(trained).items():
    np.testing.assert_array_equal(back[key], value, err_msg=str(key))
  with raises_naming(ValueError, 'lora_rank'):
    lora.with_adapters(_init(BASE.replace(lora_rank=3)), saved)
  with raises_naming(ValueError, 'lora_targets'):
    lora.with_adapters(_init(config.replace(lora_targets='query')), saved)
