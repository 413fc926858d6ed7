"""The image-classification task: batches, sources, refusals and the
experiments' settings. Training, resume and fine-tuning:
e2e/test_image_classification_e2e.py."""

import os

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer.data import downloads
from transformer.data import image_batches
from transformer.tasks import image_classification as ic

MNIST = downloads.local('mnist')  # the data folder's, when there


def test_batches_cover_every_image_once_per_epoch_and_resume_anywhere():
  labels = np.arange(10, dtype=np.int32)
  pictures = labels[:, None, None, None].astype(np.uint8)
  batches = iter(image_batches.ImageBatches(pictures, labels, batch_size=4,
                                            seed=1))
  seen = np.concatenate([next(batches)['labels'] for _ in range(5)])
  # 20 images = two epochs; each epoch is a permutation, across batch ends.
  assert sorted(seen[:10]) == list(range(10)) == sorted(seen[10:])
  assert list(seen[:10]) != list(seen[10:])
  later = iter(image_batches.ImageBatches(pictures, labels, batch_size=4,
                                          seed=1, start_step=3))
  np.testing.assert_array_equal(next(later)['labels'], seen[12:16])
  batch = next(later)
  np.testing.assert_array_equal(batch['images'][:, 0, 0, 0], batch['labels'])


def test_eval_batches_count_every_image_once_and_fill_with_minus_one():
  labels = np.arange(7, dtype=np.int32)
  pictures = np.zeros((7, 2, 2, 1), np.uint8)
  batches = list(image_batches.eval_batches(pictures, labels, batch_size=4,
                                 row_multiple=3))
  assert [len(b['labels']) for b in batches] == [6, 3]
  got = np.concatenate([b['labels'] for b in batches])
  assert sorted(got[got >= 0]) == list(range(7))
  assert (got == -1).sum() == 2


@pytest.mark.skipif(not os.path.isdir(MNIST), reason='no MNIST in the data folder')
def test_real_mnist_experiment_config_reads_the_shared_files(tmp_path):
  config = load_experiment('vit_mnist', 'runlocal')
  task = ic.ImageClassificationTask(config, str(tmp_path))
  pictures, labels, _ = task.images.split('test')
  assert pictures.shape == (10_000, 28, 28, 1) and labels.max() == 9


@pytest.mark.parametrize('name,shape,classes', [
    ('cifar10', (32, 32, 3), 10), ('mnist', (28, 28, 1), 10)])
def test_tfds_sources_under_mock_data(name, shape, classes):
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('vit_offline', 'runlocal')
  config.data.update(dict(source='tfds', tfds_name=name,
                          image_size=shape[0]))
  with tfds.testing.mock_data(num_examples=6):
    pictures, labels, names = image_batches.read_split(config.data, 'train')
  assert pictures.shape == (6, *shape) and pictures.dtype == np.uint8
  assert len(names) == classes and 0 <= labels.min() <= labels.max() < classes


def test_clear_errors(tmp_path):
  config = load_experiment('vit_offline', 'runlocal')
  config.data.crop = 'random'
  with raises_naming(ValueError, "config.data.crop='random'",
                     "('none', 'pad', 'resized')"):
    ic.ImageClassificationTask(config, str(tmp_path))
  config = load_experiment('vit_offline', 'runlocal')
  config.data.load_size = 8
  with raises_naming(ValueError, 'config.data.load_size=8', 'image_size=16'):
    ic.ImageClassificationTask(config, str(tmp_path))
  config = load_experiment('vit_offline', 'runlocal')
  with raises_naming(ValueError, 'config.data.batch_size=8', 'multiple of 3'):
    ic.ImageClassificationTask(config, str(tmp_path), batch_divisor=3)
  config.data.eval_split = 'dev'
  with raises_naming(ValueError, "'dev'", "('train', 'validation', 'test')",
                     'config.data.train_split'):
    ic.ImageClassificationTask(config, str(tmp_path)).train_iter(0)


def test_folder_classes_must_not_change_under_a_workdir(tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  def add(name):
    for split in ('train', 'test'):
      os.makedirs(tmp_path / split / name)
      Image.new('RGB', (16, 16)).save(tmp_path / split / name / '0.png')
  add('cat'), add('dog')
  config = load_experiment('vit_offline', 'runlocal')
  config.data.update(dict(source='folder', path=str(tmp_path),
                          batch_size=2, eval_batch_size=2))
  ic.ImageClassificationTask(config, str(tmp_path / 'work'))
  add('ant')
  task = ic.ImageClassificationTask(config, str(tmp_path / 'work'))
  with raises_naming(ValueError, "['ant', 'cat', 'dog']", "['cat', 'dog']",
                     'new workdir'):
    task.train_iter(0)


def test_imagenet_experiment_streams_under_mock_tfds(tmp_path):
  tfds = pytest.importorskip('tensorflow_datasets')
  paper = load_experiment('vit_imagenet', 'S/16')
  assert (paper.model.size, paper.data.batch_size, paper.model.pooling,
          paper.model.positional_encoding) == ('S/16', 1024, 'gap',
                                               'sincos2d')
  assert paper.train.num_steps == 90 * (1_281_167 // 1024)
  assert load_experiment('vit_imagenet', 'B/16').train.num_steps == 300 * 1251
  config = load_experiment('vit_imagenet', 'S/16,runlocal')
  with tfds.testing.mock_data(num_examples=6):
    task = ic.ImageClassificationTask(config, str(tmp_path / 'a'))
    assert len(task.class_names) == 1000
    first = next(iter(task.train_iter(0)))
    resumed = next(iter(task.train_iter(1)))
    again = list(zip(range(2), task.train_iter(0)))[1][1]
    assert first['images'].shape == (4, 32, 32, 3)
    np.testing.assert_array_equal(resumed['images'], again['images'])
    evaluated = list(task.eval_batches())
    assert sum((b['labels'] >= 0).sum() for b in evaluated) == 6
    params = task.init(jax.random.key(0))
    loss, _ = task.loss(params, first, jax.random.key(1),
                        deterministic=False)
  assert np.isfinite(float(loss))
  config.data.crop = 'pad'
  with pytest.raises(ValueError, match="crop='none'"):
    ic.ImageClassificationTask(config, str(tmp_path / 'c'))
