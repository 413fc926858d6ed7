"""Captioning: attention over the grid, decoding equals teacher forcing, the
doubly stochastic penalty, batches and multi-reference BLEU. End-to-end
runs of both models and the figure: e2e/test_captioning_e2e.py."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_experiment
from transformer import decoding
from transformer import metrics
from transformer import train
from transformer.models import captioning

IMAGES = jax.random.uniform(jax.random.key(0), (2, 16, 16, 3), minval=-1,
                            maxval=1)
CAPTIONS = jnp.array([[5, 6, 7, 1, 0, 0], [8, 9, 1, 0, 0, 0]])
VARIANTS = [('show_attend_tell', 'cnn'), ('show_attend_tell', 'vit'),
            ('transformer', 'cnn'), ('transformer', 'vit')]


def tiny(model, encoder):
  return captioning.config_for('tiny', model=model, encoder=encoder,
                               vocab_size=20, max_length=8, image_size=16,
                               patch_size=4, dropout_rate=0.0)


def initialised(config):
  model = captioning.build(config)
  params = nn.unbox(model.init(jax.random.key(1), IMAGES, CAPTIONS,
                               deterministic=True))['params']
  return model, params


@pytest.mark.parametrize('model_name, encoder', VARIANTS)
def test_attention_over_the_grid_sums_to_one(model_name, encoder):
  config = tiny(model_name, encoder)
  model, params = initialised(config)
  weights = captioning.word_attention(model, params, IMAGES, CAPTIONS)
  grid = config.grid_size
  assert weights.shape == (2, CAPTIONS.shape[1], grid, grid)
  assert grid == (4 if encoder == 'vit' else 16 // 2**2)
  np.testing.assert_allclose(weights.sum(axis=(2, 3)), 1.0, atol=1e-5)
  assert (weights >= 0).all()


@pytest.mark.parametrize('model_name, encoder', VARIANTS)
def test_step_by_step_decoding_equals_teacher_forcing(model_name, encoder):
  config = tiny(model_name, encoder)
  model, params = initialised(config)
  forced = model.apply({'params': params}, IMAGES, CAPTIONS,
                       deterministic=True)
  decoder = captioning.build(config, decode=True)
  state = captioning.init_decoding(decoder, params, IMAGES)
  previous, steps = jnp.zeros((2, 1), jnp.int32), []
  for t in range(CAPTIONS.shape[1]):
    logits, state = captioning.decoding_step(decoder, params, previous,
                                             state)
    steps.append(logits)
    previous = CAPTIONS[:, t:t + 1]
  np.testing.assert_allclose(jnp.stack(steps, 1), forced, atol=2e-5)


def test_beam_search_over_slots_equals_reordering_the_cache():
  """The Transformer captioner's caches tracking beams (`beam_size` > 1, the
  keys and values never copied) give what reordering them gives."""
  config = tiny('transformer', 'cnn')
  model, params = initialised(config)
  decoder = captioning.build(config, decode=True)

  @functools.partial(jax.jit, static_argnums=0)
  def search(tracked_beams):
    state = captioning.init_decoding(decoder, params, IMAGES, tracked_beams)
    return decoding.beam_search(
        functools.partial(captioning.decoding_step, decoder, params), state,
        batch_size=2, beam_size=3, max_length=config.max_length, eos_id=1)

  (tracked, tracked_scores), (moved, moved_scores) = search(3), search(1)
  assert jax.tree.leaves(captioning.init_decoding(decoder, params, IMAGES,
                                                  3)['slots'])
  np.testing.assert_array_equal(tracked, moved)
  np.testing.assert_allclose(tracked_scores, moved_scores, rtol=1e-5)
  assert len({tuple(s) for s in np.asarray(moved)[0]}) == 3  # three beams


def test_attention_depends_on_the_image():
  """The additive scores see the grid: another image moves the weights."""
  model, params = initialised(tiny('show_attend_tell', 'cnn'))
  a = captioning.word_attention(model, params, IMAGES, CAPTIONS)
  b = captioning.word_attention(model, params, -IMAGES, CAPTIONS)
  assert float(jnp.abs(a - b).max()) > 1e-4


def test_doubly_stochastic_penalty_is_part_of_the_loss(tmp_path):
  config = load_experiment('captioning_offline',
                           'model=show_attend_tell,runlocal')
  trainer = train.Trainer(config, str(tmp_path))
  batch = next(trainer.task.train_iter(0))
  params = trainer.initialise().params
  _, sums = trainer.task.loss(params, batch, None, deterministic=True)
  penalty, captions = (float(x) for x in sums['attention_penalty'])
  assert captions == len(batch['targets']) and penalty > 0
  config.train.doubly_stochastic = 0.0
  plain = train.Trainer(config, str(tmp_path)).task
  _, plain_sums = plain.loss(params, batch, None, deterministic=True)
  loss, count = (float(x) for x in sums['loss'])
  plain_loss, _ = (float(x) for x in plain_sums['loss'])
  assert loss == pytest.approx(plain_loss + penalty, rel=1e-5)
  assert float(plain_sums['nll'][0]) == pytest.approx(plain_loss, rel=1e-6)
  del count


def test_training_batches_cover_every_caption_and_resume(tmp_path):
  config = load_experiment('captioning_offline', 'model=transformer,runlocal')
  task = train.Trainer(config, str(tmp_path)).task
  index, targets = task.pairs('train')
  assert len(index) == 2 * config.data.num_train  # two references each
  epoch = len(index) // config.data.batch_size
  batches = task.train_iter(0)
  seen = np.concatenate([next(batches)['targets'] for _ in range(epoch)])
  assert sorted(map(bytes, seen)) == sorted(map(bytes, targets))
  again = next(task.train_iter(3))
  batches = task.train_iter(0)
  for _ in range(3):
    next(batches)
  np.testing.assert_array_equal(next(batches)['targets'], again['targets'])


def test_multi_reference_bleu():
  hypotheses = ['a red circle left of a blue square', 'a green ring']
  references = [['a blue square right of a red circle',
                 'a red circle left of a blue square'], ['a green ring']]
  scores = metrics.multi_reference_bleu(hypotheses, references)
  assert scores['bleu1'] == pytest.approx(100.0)
  assert scores['bleu4'] == pytest.approx(100.0)
  wrong = metrics.multi_reference_bleu(['a blue circle'], [['a red ring']])
  assert wrong['bleu1'] < 100.0
