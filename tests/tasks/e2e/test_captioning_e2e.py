"""Captioning runs end to end: both models' few steps with metrics and
figures, the caption folder source and COCO under mock TFDS."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import captions_read_under_mock_tfds
from conftest import load_experiment
from transformer import train
from transformer.models import captioning


def run(tmp_path, model, **changes):
  config = load_experiment('captioning_offline', f'model={model},runlocal')
  config.train.update(changes)
  return config, train.train_and_evaluate(config, str(tmp_path))


# The end-to-end runs are slow (CI runs the Transformer's): each model's
# loss and decoding have their own tests below, and
# test_caption_folder_source_trains runs the task's whole path by default.
@pytest.mark.parametrize('model', [
    pytest.param('show_attend_tell', marks=pytest.mark.slow),
    pytest.param('transformer', marks=[pytest.mark.slow, pytest.mark.ci])])
def test_end_to_end_few_steps_writes_metrics_and_figures(model, tmp_path):
  config, result = run(tmp_path, model)
  for key in ('bleu1', 'bleu2', 'bleu3', 'bleu4', 'exact_match', 'nll'):
    assert key in result
  assert ('attention_penalty' in result) == (model == 'show_attend_tell')
  figure = tmp_path / 'plots' / 'caption_step6_0.png'
  assert figure.stat().st_size > 10_000
  assert config.eval.num_plots == 2
  assert (tmp_path / 'plots' / 'caption_step6_1.png').exists()
  # The explorer's views: each word's attention over the grid is what the
  # caption figures show (the last layer's, heads averaged).
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from transformer.tools import explore  # pylint: disable=g-import-not-at-top
  restored = workdir_lib.restore(str(tmp_path))
  image = restored.task.split(config.data.eval_split)[0][0]
  Image.fromarray(image).save(tmp_path / 'image.png')
  _, views = explore.explore(str(tmp_path), output=str(tmp_path / 'p.html'),
                             image=str(tmp_path / 'image.png'))
  words = views[0]
  assert words.name.startswith('words attend to the image')
  assert words.grid ** 2 == len(words.keys) and words.image is not None
  with restored.active():
    [ids] = restored.task.caption(restored.params, image[None],
                                  beam_size=config.eval.beam_size,
                                  length_penalty=config.eval.length_penalty)
  ids = ids[:len(words.queries)]
  expected = captioning.word_attention(
      restored.task.model, restored.params,
      jnp.asarray(image[None], jnp.float32) / 127.5 - 1, jnp.asarray(ids[None]))
  np.testing.assert_allclose(
      words.weights[-1].mean(0),
      np.asarray(expected[0]).reshape(len(ids), -1), atol=1e-5)


# The data path is tested fast in test_captions_data (mock TFDS).
@pytest.mark.slow
def test_coco_experiment_under_mock_tfds(tmp_path, monkeypatch):
  config = load_experiment('coco_captions', 'model=transformer,runlocal')
  splits = captions_read_under_mock_tfds(config, monkeypatch)
  assert all(len(images) == 8 for images, _ in splits.values())
  result = train.train_and_evaluate(config, str(tmp_path))
  assert 'bleu4' in result and np.isfinite(result['loss'])


def test_caption_folder_source_trains(tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  root = tmp_path / 'data'
  rng = np.random.default_rng(0)
  for split in ('train', 'test'):
    (root / split).mkdir(parents=True)
    lines = []
    for i in range(4):
      Image.fromarray(rng.integers(0, 255, (20, 20, 3), np.uint8)).save(
          root / split / f'{i}.png')
      lines += [f'{i}.png\tA Red Thing number {i}',
                f'{i}.png\ta thing that is red']
    (root / split / 'captions.tsv').write_text('\n'.join(lines) + '\n')
  config = load_experiment('captioning_offline', 'model=transformer,runlocal')
  config.data.update(dict(source='folder', path=str(root), batch_size=4,
                          eval_batch_size=4))
  config.train.update(dict(num_steps=3, eval_every=3, checkpoint_every=3))
  workdir = tmp_path / 'run'
  result = train.train_and_evaluate(config, str(workdir))
  assert 'bleu4' in result
  words = (workdir / 'vocab' / 'words.json').read_text()
  assert '"red"' in words and '"Red"' not in words  # captions lower-cased
