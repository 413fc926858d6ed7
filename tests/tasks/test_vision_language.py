"""ViLBERT pretraining: swapped captions labelled by what the scene holds,
region masking and targets, the loss's parts, refusals. Runlocal end to end
and an exactly resumed run: e2e/test_vision_language_e2e.py."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import tasks
from transformer import workdir as workdir_lib
from transformer.data import tokenization
from transformer.data.generated import scenes
from transformer.insight import attention_views
from transformer.tasks import vision_language
from transformer.tools import ask


@pytest.fixture(scope='module')
def task(tmp_path_factory):
  config = load_experiment('vilbert_offline', 'runlocal')
  return tasks.build(config, str(tmp_path_factory.mktemp('vl')))


def test_swapped_captions_are_labelled_by_the_scene(task):
  drawn, objects, tokens, index = task.split('train')
  assert not (tokens == tokenization.UNK_ID).any()
  own = {i: {tuple(t) for t in tokens[index == i]}
         for i in range(len(drawn.images))}
  swapped = aligned = 0
  for step, batch in zip(range(12), task.train_iter(0)):
    for row in range(len(batch['tokens'])):
      # Which image: the one whose pixels the row holds.
      (image,) = [i for i in range(len(drawn.images))
                  if np.array_equal(drawn.images[i], batch['images'][row])]
      caption = task.tokenizer.decode(batch['tokens'][row][1:])
      true = scenes.describes(caption, objects[image])
      assert batch['aligned'][row] == true
      is_own = tuple(batch['tokens'][row]) in own[image]
      assert true or not is_own  # a negative is never the true pair
      swapped += not is_own
      aligned += int(batch['aligned'][row])
  rows = 12 * 8
  assert 0.3 * rows < swapped < 0.7 * rows and rows - swapped <= aligned


def test_hard_negatives_are_foils_of_the_images_own_caption(tmp_path):
  config = load_experiment('vilbert_offline', 'hard_negatives,runlocal')
  assert config.data.hard_negative_rate == 0.5
  config.data.update(dict(swap_rate=0.99, hard_negative_rate=1.0))
  task = tasks.build(config, str(tmp_path))
  drawn, objects, tokens, index = task.split('train')
  batch = next(task.train_iter(0))
  negatives = 0
  for row in range(len(batch['tokens'])):
    (image,) = [i for i in range(len(drawn.images))
                if np.array_equal(drawn.images[i], batch['images'][row])]
    foiled = task.tokenizer.decode(batch['tokens'][row][1:]).split()
    # One word (or the relation) away from one of the image's own captions.
    own = [task.tokenizer.decode(t[1:]).split() for t in tokens[index == image]]
    assert any(len(o) == len(foiled) and 0 < sum(
        x != y for x, y in zip(o, foiled)) <= 2 for o in own)
    true = scenes.describes(' '.join(foiled), objects[image])
    assert batch['aligned'][row] == true
    negatives += not true
  assert negatives >= len(batch['tokens']) // 2
  with raises_naming(ValueError, 'config.data.hard_negative_rate=0.5',
                     "'folder'", 'set it to 0'):
    folder = load_experiment('vilbert_offline', 'runlocal')
    folder.data.update(dict(source='folder', path=str(tmp_path),
                            hard_negative_rate=0.5))
    tasks.build(folder, str(tmp_path / 'folder'))


def test_regions_patches_boxes_and_class_targets_agree():
  drawn, _ = scenes.captioned(4, seed=0, image_size=16)
  features = np.asarray(vision_language.image_regions(drawn.images, 8))
  boxes = vision_language.region_boxes(16, 8)
  targets = np.asarray(vision_language.region_classes(
      drawn.pixel_classes, 8, scenes.NUM_CLASSES))
  np.testing.assert_allclose(targets.sum(-1), 1, rtol=1e-6)
  for r, (x0, y0, _, _) in enumerate(boxes * 16):
    patch = drawn.images[:, int(y0):int(y0) + 8, int(x0):int(x0) + 8]
    np.testing.assert_allclose(features[:, r],
                               patch.reshape(4, -1) / 127.5 - 1, atol=1e-6)
    classes = drawn.pixel_classes[:, int(y0):int(y0) + 8, int(x0):int(x0) + 8]
    np.testing.assert_allclose(targets[:, r, 0], (classes == 0).mean((1, 2)))


def test_region_masking_rates_and_padding():
  mask = jnp.ones((400, 50), bool).at[:, 40:].set(False)
  chosen, zeroed = vision_language.mask_regions(mask, jax.random.key(0), 0.15)
  chosen, zeroed = np.asarray(chosen), np.asarray(zeroed)
  assert not chosen[:, 40:].any() and not (zeroed & ~chosen).any()
  assert abs(chosen[:, :40].mean() - 0.15) < 0.01
  assert abs(zeroed.sum() / chosen.sum() - 0.9) < 0.02


def test_masked_modelling_counts_aligned_pairs_only(task):
  params = task.init(jax.random.key(0))
  batch = next(task.train_iter(0))
  # Jitted: one compile for both calls, not two runs op by op.
  loss = jax.jit(lambda p, b: task.loss(p, b, None, deterministic=True)[1])
  sums = loss(params, batch)
  none_aligned = loss(params, {**batch, 'aligned': 0 * batch['aligned']})
  assert float(sums['mlm_loss'][1]) > 0 and float(sums['region_kl'][1]) > 0
  assert float(none_aligned['mlm_loss'][1]) == 0
  assert float(none_aligned['region_kl'][1]) == 0
  assert float(none_aligned['alignment_loss'][1]) == len(batch['tokens'])


def test_retrieval_recall_counts_the_rank_of_the_true_match(task,
                                                           monkeypatch):
  params = None
  matrix = np.eye(8) + 0.01 * np.arange(8)[None]  # the true pair first
  monkeypatch.setattr(task, 'alignment_scores', lambda *args: matrix)
  assert set(task.evaluate(params, label='x').values()) == {1.0}
  # Each caption's true image ranked 3rd (two images above it).
  shifted = np.roll(np.eye(8), 1, 1) + np.roll(np.eye(8), 2, 1) \
      + 0.5 * np.eye(8)
  monkeypatch.setattr(task, 'alignment_scores', lambda *args: shifted)
  result = task.evaluate(params, label='x')
  assert result['image_retrieval_r1'] == 0
  assert result['image_retrieval_r5'] == result['image_retrieval_r10'] == 1
  # A constant score recalls nothing at 1.
  monkeypatch.setattr(task, 'alignment_scores',
                      lambda *args: np.zeros((8, 8)))
  assert task.evaluate(params, label='x')['caption_retrieval_r1'] == 0


def test_a_question_only_model_draws_no_attention_over_the_image(tmp_path):
  blind = load_experiment('vilbert_vqa', 'blind,runlocal')
  workdir = tmp_path / 'blind'
  task = tasks.build(blind, str(workdir))
  params = task.init(jax.random.key(0))
  task.evaluate(params, label='step0')  # no co-attention figures
  assert not (workdir / 'plots').exists() or not os.listdir(workdir / 'plots')
  # Its only view: the words', the same whatever the image.
  questions = task.split('test')[0]
  views = [attention_views.of(task, params, questions.questions[0], image)
           for image in questions.scenes.images[:2]]
  assert [v.name for v in views[0]] == [
      'self-attention over the words (a question-only model never sees the '
      'image)']
  np.testing.assert_array_equal(views[0][0].weights, views[1][0].weights)
  assert views[0][0].queries == views[0][0].keys
  workdir_lib.save_config(blind, str(workdir))
  Image.fromarray(questions.scenes.images[0]).save(tmp_path / 'scene.png')
  with raises_naming(ValueError, str(workdir), 'config.data.blind',
                     '--attention_dir'):
    ask.ask(str(workdir), str(tmp_path / 'scene.png'), ['how many?'],
            attention_dir=str(tmp_path / 'maps'))


def test_scene_tasks_refuse_captions_from_files(tmp_path):
  config = load_experiment('vilbert_vqa', 'runlocal')
  config.data.source = 'tfds'
  with raises_naming(ValueError, "config.data.source='tfds'", "('offline',)"):
    tasks.build(config, str(tmp_path)).split('train')
