"""Memory and speed options: gradient accumulation, remat, scanned layers,
bfloat16 optimizer state. Each must leave the computed function unchanged.
(A run with all of them: e2e/test_memory_options_e2e.py.)"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_experiment
from transformer import decoding
from transformer import layers
from transformer import sharding
from transformer import train
from transformer.models import decoder
from transformer.models import encoder_decoder


def sgd_config(name):
  config = load_experiment(name, 'runlocal')
  config.model.dropout_rate = 0.0
  config.optimizer.update(dict(name='sgd', schedule='constant',
                               learning_rate=0.5, weight_decay=0.0))
  return config


@pytest.mark.parametrize('name', ['mt_offline', 'lm_offline'])
def test_accumulated_micro_batches_give_the_whole_batch_update(name, tmp_path):
  config = sgd_config(name)
  whole = train.Trainer(config, str(tmp_path))
  batch = next(whole.task.train_iter(0))
  config.train.microbatches = 4
  accumulated = train.Trainer(config, str(tmp_path))
  results = []
  for trainer in (whole, accumulated):
    with sharding.active(trainer.mesh, trainer.rules):
      state, sums, _ = trainer.train_step(
          trainer.initialise(), sharding.global_batch(batch, trainer.mesh))
    results.append((state.params, jax.device_get(sums)))
  (params, sums), (params_4, sums_4) = results
  for key in sums:
    np.testing.assert_allclose(sums_4[key], sums[key], rtol=1e-5)
  differences = jax.tree.leaves(jax.tree.map(
      lambda a, b: float(jnp.abs(a - b).max()), params, params_4))
  assert max(differences) < 1e-6
  # The micro-batches (rows i, i + 4, ...) hold unequal token counts, so a
  # plain mean of their losses would differ; the weighted sum does not.
  assert batch['targets'].shape[0] % 4 == 0
  counts = {int((batch['targets'][i::4] > 0).sum()) for i in range(4)}
  assert len(counts) > 1


def test_micro_batches_must_divide_the_batch(tmp_path):
  config = sgd_config('mt_offline')
  config.train.microbatches = 0
  with pytest.raises(ValueError, match='microbatches'):
    train.Trainer(config, str(tmp_path))


TOKENS = jax.random.randint(jax.random.key(1), (2, 12), 3, 50)


@pytest.mark.parametrize('options', [
    dict(scan_layers=True), dict(remat='full'), dict(remat='dots'),
    dict(remat='dots', scan_layers=True)])
def test_remat_and_scan_compute_the_same_loss_and_gradients(options):
  config = decoder.config_for('tiny', vocab_size=50, max_length=16,
                              num_layers=3)
  plain, changed = decoder.Decoder(config), decoder.Decoder(
      config.replace(**options))
  params = nn.unbox(changed.init(jax.random.key(0), TOKENS,
                                 deterministic=True))['params']
  if options.get('scan_layers'):
    leaf = params['blocks'][layers.SCANNED]['block']['mlp']['wi']['kernel']
    assert leaf.shape[0] == 3  # stacked on the 'layers' axis
  unstacked = layers.unstack_layers(params)
  assert set(unstacked['blocks']) >= {'layer_0', 'layer_1', 'layer_2'}

  def loss(model, p):
    logits = model.apply({'params': p}, TOKENS, deterministic=True)
    return jax.nn.log_softmax(logits).mean()

  # Jitted: one compile each instead of running op by op.
  value, grads = jax.jit(jax.value_and_grad(lambda p: loss(changed, p)))(
      params)
  plain_value, plain_grads = jax.jit(jax.value_and_grad(
      lambda p: loss(plain, p)))(unstacked)
  assert float(value) == pytest.approx(float(plain_value), rel=1e-6)
  for a, b in zip(jax.tree.leaves(layers.unstack_layers(grads)),
                  jax.tree.leaves(plain_grads)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  if options.get('remat'):
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: loss(changed, p)))(params))
    assert 'checkpoint' in jaxpr or 'remat' in jaxpr


def test_scanned_translation_model_decodes_like_the_unscanned_one():
  config = encoder_decoder.config_for('tiny', vocab_size=50, max_length=16,
                                      num_layers=2)
  scanned = encoder_decoder.Transformer(config.replace(scan_layers=True))
  params = nn.unbox(scanned.init(jax.random.key(0), TOKENS, TOKENS,
                                 deterministic=True))['params']
  decoded = []
  for model_config, p in ((config.replace(scan_layers=True), params),
                          (config, layers.unstack_layers(params))):
    model = encoder_decoder.build(model_config, decode=True)
    state = encoder_decoder.init_decoding(model, p, TOKENS, 10)
    step = lambda tokens, s, model=model, p=p: encoder_decoder.decoding_step(
        model, p, tokens, s)
    decoded.append(decoding.greedy_search(step, state, batch_size=2,
                                          max_length=10, eos_id=2)[0])
  np.testing.assert_array_equal(decoded[0], decoded[1])


def test_unknown_remat_policy_is_refused():
  with pytest.raises(ValueError, match='remat'):
    decoder.config_for('tiny', remat='some')
