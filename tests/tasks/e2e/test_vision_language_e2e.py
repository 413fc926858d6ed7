"""ViLBERT end to end: runlocal pretraining and an exactly resumed run,
question answering and referring expressions from it, captions from
files and COCO under mock TFDS."""

import os

import jax
import numpy as np
from PIL import Image
import pytest

from conftest import captions_read_under_mock_tfds
from conftest import load_experiment
from conftest import raises_naming
from transformer import tasks
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import tokenization
from transformer.data.generated import scenes
from transformer.tools import ask
from transformer.tools import explore


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory):
  config = load_experiment('vilbert_offline', 'runlocal')
  workdir = str(tmp_path_factory.mktemp('pretrained'))
  result = train.train_and_evaluate(config, workdir)
  for metric in ('image_retrieval_r1', 'caption_retrieval_r10', 'mlm_accuracy',
                 'region_kl', 'alignment_accuracy'):
    assert 0 <= result[metric] < 100, metric
  return config, workdir


@pytest.mark.slow  # bitwise resume is in the default run via test_faults
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


# 37 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
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
    assert not (vqa.split(split)[1] == tokenization.UNK_ID).any()
    assert (vqa.split(split)[1] > 0).sum(1).min() >= 5
  result = train.train_and_evaluate(config, str(tmp_path))
  assert {f'accuracy_{kind}' for kind in scenes.QUESTION_TYPES} <= set(result)
  drawn = sorted(os.listdir(tmp_path / 'plots'))
  first = f'coattention_step{config.train.num_steps}_0'
  # Overlays per layer; word x patch and patch x word per layer and head.
  for suffix in ('', '_heads', '_regions'):
    assert f'{first}{suffix}.png' in drawn, drawn

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
  assert len(os.listdir(tmp_path / 'maps')) == 2 * 3
  with raises_naming(ValueError, "['banana']", 'colour'):
    ask.ask(str(tmp_path), str(tmp_path / 'scene.png'),
            ['what colour is the banana?'])
  # The explorer page: the words' co-attention over the regions (with the
  # IMG token first) is what the co-attention figures show.
  page, views = explore.explore(str(tmp_path), questions.questions[0],
                                str(tmp_path / 'page.html'),
                                image=str(tmp_path / 'scene.png'))
  assert os.path.getsize(page) > 1_000
  words_view = views[0]
  assert words_view.keys[0] == '[IMG]' and words_view.first_patch == 1
  length = len(words_view.queries)
  tokens = restored.task.encode_questions([questions.questions[0]])
  with restored.active():
    words, _ = restored.task.co_attention(
        restored.params, tokens, questions.scenes.images[:1])
  np.testing.assert_allclose(words_view.weights[..., 1:],
                             np.asarray(words)[0][:, :, :length], atol=1e-6)
  np.testing.assert_allclose(words_view.weights.sum(-1), 1.0, atol=1e-5)
  assert [v.name for v in views][1:] == [
      'regions attend to the words (co-attention)',
      'text stream self-attention', 'visual stream self-attention']
  # The question-only model sees no regions: the image changes nothing.
  blind = load_experiment('vilbert_vqa', 'blind,runlocal')
  task = tasks.build(blind, str(tmp_path / 'blind'))
  params = task.init(jax.random.key(0))
  batch = next(task.train_iter(0))
  other = {**batch, 'images': batch['images'][::-1]}
  np.testing.assert_array_equal(task.logits(params, batch),
                                task.logits(params, other))


@pytest.mark.slow  # with the pretraining fixture, 19 s; CI runs it
@pytest.mark.ci
def test_referring_expressions_from_pretraining(pretrained, tmp_path):
  _, source = pretrained
  config = load_experiment('vilbert_refer', 'runlocal')
  config.train.init_from = source
  result = train.train_and_evaluate(config, str(tmp_path))
  assert 0 <= result['accuracy'] <= 1
  assert result['accuracy'] >= result['exact_proposal']
  task = workdir_lib.restore(str(tmp_path)).task
  _, tokens, crops = task.split('test')
  assert not (tokens == tokenization.UNK_ID).any()
  assert crops.shape[1:] == (10, 8, 8, 3)


def _caption_folder(root, rng):
  """Four images per split, two captions each, as the captioning task's
  folder source reads them."""
  for split in ('train', 'test'):
    (root / split).mkdir(parents=True)
    lines = []
    for i in range(4):
      Image.fromarray(rng.integers(0, 255, (20, 20, 3), np.uint8)).save(
          root / split / f'{i}.png')
      lines += [f'{i}.png\tNumber {i} is a thing', f'{i}.png\tthing {i}']
    (root / split / 'captions.tsv').write_text('\n'.join(lines) + '\n')


def test_captions_from_files_regress_masked_region_features(tmp_path):
  _caption_folder(tmp_path / 'data', np.random.default_rng(0))
  config = load_experiment('vilbert_offline', 'runlocal')
  config.data.update(dict(source='folder', path=str(tmp_path / 'data'),
                          max_length=5))  # some captions are cut
  config.train.update(dict(num_steps=3, eval_every=3, checkpoint_every=3))
  task = tasks.build(config, str(tmp_path / 'run'))
  # No classes: a masked region predicts its features.
  assert task.model_config.num_region_classes == 3 * 8 * 8
  _, objects, tokens, index = task.split('train')
  assert objects is None and tokens.shape == (8, 5)
  assert (tokens[0::2, -1] == tokenization.EOS_ID).all()  # cut, EOS kept
  for batch in (b for _, b in zip(range(6), task.train_iter(0))):
    assert 'pixel_classes' not in batch
    for row in range(len(batch['tokens'])):
      # Aligned exactly when the caption is one of the image's own.
      (image,) = [i for i in range(4) if np.array_equal(
          task.split('train')[0].images[i], batch['images'][row])]
      own = {tuple(t) for t in tokens[index == image]}
      assert batch['aligned'][row] == (tuple(batch['tokens'][row]) in own)
  result = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert np.isfinite(result['region_mse']) and 'region_kl' not in result
  assert 0 <= result['image_retrieval_r10'] <= 1


# The TFDS read is tested fast in test_captions_data (mock TFDS).
@pytest.mark.slow
def test_coco_pretraining_under_mock_tfds(tmp_path, monkeypatch):
  config = load_experiment('vilbert_coco', 'runlocal')
  captions_read_under_mock_tfds(config, monkeypatch)
  result = train.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(result['loss']) and 'region_mse' in result
