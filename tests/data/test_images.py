"""Image data: the offline shapes, MNIST idx files, folders, augmentation."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from conftest import write_idx
from transformer.data import augment
from transformer.data import downloads
from transformer.data import images

MNIST = downloads.local('mnist')  # the data folder's, when there


def test_offline_shapes_are_deterministic_balanced_and_varied():
  x, y, names = images.offline_shapes(2_000, seed=3, image_size=24)
  again, _, _ = images.offline_shapes(2_000, seed=3, image_size=24)
  other, _, _ = images.offline_shapes(2_000, seed=4, image_size=24)
  assert x.shape == (2_000, 24, 24, 3) and x.dtype == np.uint8
  np.testing.assert_array_equal(x, again)
  assert np.abs(x.astype(int) - other).mean() > 20
  assert len(names) == 10 and np.bincount(y, minlength=10).min() > 150
  # Colour carries no class information: mean colours of two classes agree.
  means = [x[y == c].reshape(-1, 3).mean(0) for c in range(10)]
  assert np.abs(means[0] - means[9]).max() < 12


def test_offline_shape_classes_are_not_separable_by_pixel_statistics():
  """A nearest-class-mean classifier on raw pixels stays near chance: the
  classes need more than template matching on a fixed position."""
  x, y, _ = images.offline_shapes(3_000, seed=0, image_size=16)
  xt, yt, _ = images.offline_shapes(1_000, seed=1, image_size=16)
  flat = lambda a: a.reshape(len(a), -1).astype(np.float32)
  means = np.stack([flat(x[y == c]).mean(0) for c in range(10)])
  predicted = ((flat(xt)[:, None] - means[None])**2).sum(-1).argmin(1)
  assert (predicted == yt).mean() < 0.35


def test_read_mnist_idx_files(tmp_path):
  pixels = np.random.default_rng(0).integers(0, 256, (5, 28, 28))
  write_idx(tmp_path / 't10k-images-idx3-ubyte.gz', pixels)
  write_idx(tmp_path / 't10k-labels-idx1-ubyte.gz', np.arange(5))
  x, y, names = images.read_mnist(str(tmp_path), 'test')
  np.testing.assert_array_equal(x[..., 0], pixels)
  np.testing.assert_array_equal(y, np.arange(5))
  assert names[3] == '3'
  with raises_naming(FileNotFoundError, 'train-images-idx3-ubyte',
                     'config.data.path'):
    images.read_mnist(str(tmp_path), 'train')
  write_idx(tmp_path / 'train-images-idx3-ubyte.gz', pixels)
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.arange(4))
  with raises_naming(ValueError, '5 images', '4 labels', 'fetch both again'):
    images.read_mnist(str(tmp_path), 'train')


@pytest.mark.skipif(not os.path.isdir(MNIST), reason='no MNIST in the data folder')
def test_real_mnist():
  x, y, _ = images.read_mnist(MNIST, 'test')
  assert x.shape == (10_000, 28, 28, 1)
  assert np.bincount(y).tolist()[:2] == [980, 1135]


def test_read_folder(tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split, count in (('train', 2), ('test', 1)):
    for name, colour in (('red', (255, 0, 0)), ('blue', (0, 0, 255))):
      os.makedirs(tmp_path / split / name)
      for i in range(count):
        Image.new('RGB', (10, 7), colour).save(tmp_path / split / name /
                                                f'{i}.png')
  (tmp_path / 'train' / 'red' / 'notes.txt').write_text('not an image')
  x, y, names = images.read_folder(str(tmp_path), 'train', image_size=8)
  assert names == ('blue', 'red') and x.shape == (4, 8, 8, 3)
  np.testing.assert_array_equal(x[y == 1][..., 0], 255)
  np.testing.assert_array_equal(x[y == 0][..., 2], 255)
  _, yt, _ = images.read_folder(str(tmp_path), 'test', image_size=8,
                                class_names=names)
  assert sorted(yt.tolist()) == [0, 1]
  with raises_naming(FileNotFoundError, str(tmp_path / 'validation'),
                     'ROOT/SPLIT/CLASS_NAME/'):
    images.read_folder(str(tmp_path), 'validation', image_size=8)


# The augmentations run inside the jitted train step; here too, under jit:
# eagerly each of their operations compiles on its own, per shape (a
# RandAugment layer alone has hundreds), where jit compiles one program.
random_flip = jax.jit(augment.random_flip)
random_pad_crop = jax.jit(augment.random_pad_crop, static_argnums=2)
random_resized_crop = jax.jit(augment.random_resized_crop, static_argnums=2,
                              static_argnames=('scale', 'ratio'))
crop_and_resize = jax.jit(augment._crop_and_resize, static_argnums=2)
rand_augment = jax.jit(augment.rand_augment,
                       static_argnames=('num_layers', 'magnitude'))
operations = jax.jit(augment._operations)
mixup = jax.jit(augment.mixup)


def batch(seed=0, b=4, size=12):
  """Random images as the pipeline makes them: uint8 values in [0, 1]."""
  pixels = np.random.default_rng(seed).integers(0, 256, (b, size, size, 3))
  return augment.to_unit(jnp.asarray(pixels, jnp.uint8))


def test_flip_mirrors_some_images_exactly():
  x = batch(b=64)
  flipped = random_flip(jax.random.key(0), x)
  mirrored = np.all(np.asarray(flipped) == np.asarray(x[:, :, ::-1]),
                    axis=(1, 2, 3))
  same = np.all(np.asarray(flipped) == np.asarray(x), axis=(1, 2, 3))
  assert np.all(mirrored | same) and 16 < mirrored.sum() < 48


def test_pad_crop_is_a_shifted_window():
  x = batch()
  out = np.asarray(random_pad_crop(jax.random.key(1), x, 3))
  padded = np.pad(np.asarray(x), ((0, 0), (3, 3), (3, 3), (0, 0)))
  for i in range(4):
    assert any(np.array_equal(out[i], padded[i, r:r + 12, c:c + 12])
               for r in range(7) for c in range(7))


def test_resized_crop_of_the_whole_image_is_the_image():
  x = batch(size=16)
  whole = random_resized_crop(jax.random.key(0), x, 16, scale=(1.0, 1.0),
                              ratio=(1.0, 1.0))
  np.testing.assert_allclose(whole, x, atol=1e-5)
  small = random_resized_crop(jax.random.key(0), x, 8)
  assert small.shape == (4, 8, 8, 3)
  # A half-size crop of a constant image is that constant.
  flat = random_resized_crop(jax.random.key(2), jnp.full(x.shape, .3), 8,
                             scale=(0.25, 0.25))
  np.testing.assert_allclose(flat, 0.3, atol=1e-5)


def test_crop_box_convention():
  """A box (top, left, height, width) at the output size is that window."""
  x = batch(size=16)[0]
  window = crop_and_resize(x, jnp.asarray([2.0, 5.0, 8.0, 8.0]), 8)
  np.testing.assert_allclose(window, x[2:10, 5:13], atol=1e-5)


def test_shape_colours_always_contrast():
  foreground, background = images.contrasting_colours(
      np.random.default_rng(0), 100_000)
  assert np.abs(foreground - background).max(1).min() >= 0.35
  assert foreground.min() >= 0 and foreground.max() <= 1
  # Still spread over the whole colour cube, not only the fixed ones.
  assert np.abs(foreground.mean(0) - 0.5).max() < 0.02


def test_center_crop():
  x = batch(size=10)
  np.testing.assert_array_equal(augment.center_crop(x, 6), x[:, 2:8, 2:8])
  with raises_naming(ValueError, '12x12', '10x10', 'config.data.load_size'):
    augment.center_crop(x, 12)


def test_rand_augment_at_magnitude_zero_changes_nothing():
  x = batch(b=16)
  out = rand_augment(jax.random.key(0), x, num_layers=3, magnitude=0)
  np.testing.assert_allclose(out, x, atol=1e-5)
  strong = rand_augment(jax.random.key(0), x, num_layers=2, magnitude=9)
  assert strong.shape == x.shape
  assert float(strong.min()) >= 0 and float(strong.max()) <= 1
  assert np.abs(np.asarray(strong - x)).mean() > 0.02


def test_every_rand_augment_operation_is_identity_at_level_zero():
  x = batch()[0]
  for out in operations(x, jnp.float32(0.0), jnp.float32(1.0)):
    np.testing.assert_allclose(out, x, atol=1e-5)
  dim = x * 0.5 + 0.25  # a low-contrast image, which autocontrast stretches
  changed = operations(dim, jnp.float32(1.0), jnp.float32(1.0))
  assert len(changed) == augment.NUM_OPERATIONS
  assert all(np.abs(np.asarray(o - dim)).max() > 0.05 for o in changed[1:])


def test_mixup_is_a_convex_combination():
  x = batch()
  targets = jax.nn.one_hot(jnp.arange(4), 5)
  mixed, mixed_targets = mixup(jax.random.key(0), x, targets, 0.4)
  lam = float(mixed_targets[0, 0])
  np.testing.assert_allclose(mixed, lam * x + (1 - lam) * x[::-1], atol=1e-6)
  np.testing.assert_allclose(mixed_targets.sum(-1), 1.0, atol=1e-6)
  assert 0.0 <= lam <= 1.0
