"""ViLBERT pretraining: swapped captions labelled by what the scene holds,
region masking and targets, the loss's parts, runlocal end to end and an
exactly resumed run."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import pytest

from conftest import load_experiment
from transformer import tasks
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import scenes
from transformer.data import tokenizers
from transformer.tasks import vision_language
from transformer.tools import ask


@pytest.fixture(scope='module')
def task(tmp_path_factory):
  config = load_experiment('vilbert_offline', 'runlocal')
  return tasks.build(config, str(tmp_path_factory.mktemp('vl')))


def test_swapped_captions_are_labelled_by_the_scene(task):
  drawn, objects, tokens, index = task.split('train')
  assert not (tokens == tokenizers.UNK_ID).any()
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
  _, sums = task.loss(params, batch, None, deterministic=True)
  _, none_aligned = task.loss(params, {**batch, 'aligned': 0 * batch[
      'aligned']}, None, deterministic=True)
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


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory):
  config = load_experiment('vilbert_offline', 'runlocal')
  workdir = str(tmp_path_factory.mktemp('pretrained'))
  result = train.train_and_evaluate(config, workdir)
  for metric in ('image_retrieval_r1', 'caption_retrieval_r10', 'mlm_accuracy',
                 'region_kl', 'alignment_accuracy'):
    assert 0 <= result[metric] < 100, metric
  return config, workdir


def test_pretraining_runs_and_resumes_exactly(pretrained, tmp_path):
  config, full = pretrained
  partial = config.copy_and_resolve_references()
  partial.train.num_steps = 3
  interrupted = str(tmp_path)
  train.train_and_evaluate(partial, interrupted)
  train.train_and_evaluate(config, interrupted)
  a, b = workdir_lib.restore(full), workdir_lib.restore(interrupted)
  assert a.step == b.step == config.train.num_steps
  jax.tree.map(np.testing.assert_array_equal, a.params, b.params)


def test_question_answering_starts_from_pretraining_and_reports_types(
    pretrained, tmp_path):
  _, source = pretrained
  config = load_experiment('vilbert_vqa', 'runlocal')
  config.train.init_from = source
  trainer = train.Trainer(config, str(tmp_path))
  started = train.warm_start(trainer, trainer.initialise().params)
  loaded = workdir_lib.restore(source).params
  for name in ('embed', 'text_layers_0', 'visual_layers_1', 'co_layers_0',
               'image_pooler'):
    jax.tree.map(np.testing.assert_array_equal, started[name], loaded[name])
  assert 'answer' in started and 'alignment' not in started
  # Its vocabulary is the pretraining one, and knows every question word.
  vqa = trainer.task
  assert vqa.tokenizer.words == workdir_lib.restore(source).task.tokenizer.words
  for split in ('train', 'test'):
    assert not (vqa.split(split)[1] == tokenizers.UNK_ID).any()
    assert (vqa.split(split)[1] > 0).sum(1).min() >= 5
  result = train.train_and_evaluate(config, str(tmp_path))
  assert {f'accuracy_{kind}' for kind in scenes.QUESTION_TYPES} <= set(result)
  assert any(name.startswith('coattention_')
             for name in os.listdir(tmp_path / 'plots'))

  # The ask command answers as the task does, and draws the co-attention.
  questions = vqa.split('test')[0]
  Image.fromarray(questions.scenes.images[0]).save(tmp_path / 'scene.png')
  answers, step = ask.ask(str(tmp_path), str(tmp_path / 'scene.png'),
                          [questions.questions[0],
                           'How many rings are there?'],
                          top_k=3, attention_dir=str(tmp_path / 'maps'))
  assert step == config.train.num_steps and len(answers) == 2
  restored = workdir_lib.restore(str(tmp_path))
  expected = scenes.ANSWERS[int(restored.task.predict(restored.params,
                                                      'test')[0])]
  assert answers[0][1][0][0] == expected
  probabilities = [p for _, p in answers[1][1]]
  assert probabilities == sorted(probabilities, reverse=True)
  assert len(os.listdir(tmp_path / 'maps')) == 2
  with pytest.raises(ValueError, match='never saw.*banana'):
    ask.ask(str(tmp_path), str(tmp_path / 'scene.png'),
            ['what colour is the banana?'])
  # The question-only model sees no regions: the image changes nothing.
  blind = load_experiment('vilbert_vqa', 'blind,runlocal')
  task = tasks.build(blind, str(tmp_path / 'blind'))
  params = task.init(jax.random.key(0))
  batch = next(task.train_iter(0))
  other = {**batch, 'images': batch['images'][::-1]}
  np.testing.assert_array_equal(task.logits(params, batch),
                                task.logits(params, other))


def test_referring_expressions_from_pretraining(pretrained, tmp_path):
  _, source = pretrained
  config = load_experiment('vilbert_refer', 'runlocal')
  config.train.init_from = source
  result = train.train_and_evaluate(config, str(tmp_path))
  assert 0 <= result['accuracy'] <= 1
  assert result['accuracy'] >= result['exact_proposal']
  task = workdir_lib.restore(str(tmp_path)).task
  _, tokens, crops = task.split('test')
  assert not (tokens == tokenizers.UNK_ID).any()
  assert crops.shape[1:] == (10, 8, 8, 3)
