"""Image classification data without TensorFlow: a generated shapes dataset,
MNIST's original idx files, and folders of image files.

Every source returns (images uint8 [N, H, W, C], labels int32 [N], class
names). Augmentation runs on the accelerator (`transformer.data.augment`),
batching in `transformer.tasks.image_classification`.
"""

from __future__ import annotations

import math
import os

from absl import logging
import numpy as np

from transformer import storage

# The offline dataset's classes, each a region in coordinates (u, v)
# relative to the shape's centre and radius (v points down).
SHAPES = ('circle', 'ring', 'square', 'frame', 'diamond', 'triangle_up',
          'triangle_down', 'plus', 'cross', 'bar')


def _shape_mask(name: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
  au, av = np.abs(u), np.abs(v)
  radius = np.sqrt(u * u + v * v)
  box = np.maximum(au, av)
  if name == 'circle':
    return radius <= 1.0
  if name == 'ring':
    return (radius <= 1.0) & (radius >= 0.55)
  if name == 'square':
    return box <= 0.8
  if name == 'frame':
    return (box <= 0.9) & (box >= 0.55)
  if name == 'diamond':
    return au + av <= 1.0
  if name == 'triangle_up':  # apex at the top
    return (v <= 0.8) & (au <= (v + 1.0) / 1.8)
  if name == 'triangle_down':
    return (v >= -0.8) & (au <= (1.0 - v) / 1.8)
  if name == 'plus':
    return ((au <= 0.28) & (av <= 1.0)) | ((av <= 0.28) & (au <= 1.0))
  if name == 'cross':
    return (box <= 0.85) & ((np.abs(u - v) <= 0.4) | (np.abs(u + v) <= 0.4))
  if name == 'bar':
    return (av <= 0.3) & (au <= 1.0)
  raise ValueError(f'Unknown shape {name!r}.')


def contrasting_colours(rng: np.random.Generator, n: int
                        ) -> tuple[np.ndarray, np.ndarray]:
  """n random (foreground, background) RGB pairs in [0, 1], at least 0.35
  apart in some channel: where a random pair is not, one channel of the
  foreground is moved 0.5 away from the background's."""
  background = rng.uniform(0, 1, (n, 3))
  foreground = rng.uniform(0, 1, (n, 3))
  weak = np.flatnonzero(np.abs(foreground - background).max(1) < 0.35)
  channel = rng.integers(0, 3, len(weak))
  base = background[weak, channel]
  foreground[weak, channel] = np.where(base < 0.5, base + 0.5, base - 0.5)
  return foreground, background


def offline_shapes(num_examples: int, seed: int, *, image_size: int = 32
                   ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """Generated images of ten shape classes (`SHAPES`).

  Each image: a random background and foreground colour (never close), a
  shape of random size (radius 20-40% of the image) at a random position,
  Gaussian pixel noise of random strength. Colour, size and place carry no
  information about the class, so a classifier must learn the shapes.
  Deterministic in (num_examples, seed); different seeds give different
  images (use one seed per split).

  Returns:
    images [N, S, S, 3] uint8, labels [N] int32, class names.
  """
  rng = np.random.default_rng([seed, 20_211])
  n, s = num_examples, image_size
  labels = rng.integers(0, len(SHAPES), n).astype(np.int32)
  radius = rng.uniform(0.2, 0.4, (n, 1, 1)) * s
  centre = rng.uniform(0, 1, (n, 2, 1, 1)) * (s - 2 * radius[:, None]) \
      + radius[:, None]
  foreground, background = contrasting_colours(rng, n)
  rows, cols = np.meshgrid(np.arange(s) + 0.5, np.arange(s) + 0.5,
                           indexing='ij')
  u = (cols[None] - centre[:, 0]) / radius
  v = (rows[None] - centre[:, 1]) / radius
  mask = np.zeros((n, s, s), bool)
  for label, name in enumerate(SHAPES):
    chosen = labels == label
    mask[chosen] = _shape_mask(name, u[chosen], v[chosen])
  images = np.where(mask[..., None], foreground[:, None, None],
                    background[:, None, None])
  noise = rng.uniform(0.02, 0.15, (n, 1, 1, 1))
  images = images + noise * rng.standard_normal(images.shape)
  images = np.clip(np.round(images * 255), 0, 255).astype(np.uint8)
  return images, labels, SHAPES


MNIST_FILES = {'train': 'train', 'test': 't10k'}


def _read_idx(path: str) -> np.ndarray:
  """An idx file (optionally gzipped): magic, dims, then big-endian data."""
  data = storage.read_bytes(path)
  if len(data) < 4 or data[:2] != b'\0\0' or data[2] != 8:
    raise ValueError(f'{path} is not an idx file of unsigned bytes.')
  ndim = data[3]
  if len(data) < 4 + 4 * ndim:
    raise ValueError(f'{path}: the header is truncated.')
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big')
                for i in range(ndim))
  found, expected = len(data) - 4 - 4 * ndim, math.prod(shape)
  # math.prod of Python's integers: a hostile header cannot overflow it.
  if found < expected:
    raise ValueError(f'{path}: the header says {shape}, {expected:,} values, '
                     f'but {found:,} follow; the file is truncated. Fetch '
                     f'it again.')
  if found > expected:
    raise ValueError(f'{path}: {found - expected:,} bytes follow the '
                     f'{shape} array its header announces; the header is '
                     f'wrong or the file is not one idx array. Fetch it '
                     f'again.')
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _read_mnist_file(folder: str, name: str,
                     ndim: int) -> tuple[str, np.ndarray]:
  """The path and array of `name` or `name`.gz in `folder`, refused unless
  it has `ndim` dimensions."""
  for candidate in (name, name + '.gz'):
    path = os.path.join(folder, candidate)
    if os.path.exists(path):
      array = _read_idx(path)
      if array.ndim != ndim:
        raise ValueError(
            f'{path} holds an array of shape {array.shape}, but MNIST\'s '
            f'{name.split("-")[1]} are {ndim}-dimensional; are the images '
            f'and labels files swapped?')
      return path, array
  raise FileNotFoundError(
      f'No {name}[.gz] in {folder!r}: point config.data.path at a folder '
      f'with the four MNIST idx files.')


def read_mnist(folder: str, split: str
               ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """MNIST from its original idx files ({train,t10k}-images-idx3-ubyte and
  -labels-idx1-ubyte, gzipped or not) in `folder`. Split 'train' or 'test'.

  Returns:
    images [N, 28, 28, 1] uint8, labels [N] int32, class names '0'..'9'.
  """
  if split not in MNIST_FILES:
    raise ValueError(f"MNIST has splits 'train' and 'test', not {split!r}.")
  prefix = MNIST_FILES[split]
  images_path, images = _read_mnist_file(
      folder, f'{prefix}-images-idx3-ubyte', 3)
  path, labels = _read_mnist_file(folder, f'{prefix}-labels-idx1-ubyte', 1)
  if len(images) != len(labels):
    raise ValueError(f'{len(images)} images but {len(labels)} labels: '
                     f'{images_path} and {path} do not match; fetch both '
                     f'again.')
  if len(labels) and labels.max() > 9:
    raise ValueError(f'{path}: label {labels.max()} at position '
                     f'{int(labels.argmax())} is not a digit 0-9; the file '
                     f'is damaged or not MNIST. Fetch it again.')
  return images[..., None], labels.astype(np.int32), tuple('0123456789')


IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.gif')


def square(image: np.ndarray, size: int) -> np.ndarray:
  """uint8 [H, W, C] -> [size, size, C]: the shorter side resized to `size`
  (bilinear), then the centre square; unchanged if already that size."""
  h, w, c = image.shape
  if (h, w) == (size, size):
    return image
  from PIL import Image  # pylint: disable=g-import-not-at-top
  scale = size / min(h, w)
  new = (max(size, round(w * scale)), max(size, round(h * scale)))
  resized = Image.fromarray(image[..., 0] if c == 1 else image).resize(
      new, Image.BILINEAR)
  array = np.asarray(resized, np.uint8).reshape(new[1], new[0], c)
  top, left = (new[1] - size) // 2, (new[0] - size) // 2
  return array[top:top + size, left:left + size]


class BadImageError(ValueError):
  """An image file that does not decode (truncated, corrupt, not an image)."""


BAD_IMAGES = ('error', 'skip')


def read_image(path: str, image_size: int | None = None,
               channels: int = 3) -> np.ndarray:
  """One image file as uint8 [H, W, C], optionally `square`d to a size."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from PIL import UnidentifiedImageError  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as image:
      array = np.asarray(image.convert('RGB' if channels == 3 else 'L'),
                         np.uint8)
  except (UnidentifiedImageError, OSError) as e:
    raise BadImageError(f'{path} cannot be decoded as an image: {e}') from e
  except Image.DecompressionBombError as e:
    # A few bytes that would decode to gigabytes.
    raise BadImageError(f'{path} is not decoded: {e}') from e
  array = array if array.ndim == 3 else array[..., None]
  return array if image_size is None else square(array, image_size)


def _check_classes_have_images(folder: str, names: list[str]) -> None:
  """Refuses a class folder of the training split without image files: the
  class would have an output that training never sees."""
  for name in names:
    directory = os.path.join(folder, name)
    if not any(f.lower().endswith(IMAGE_EXTENSIONS)
               for f in os.listdir(directory)):
      raise ValueError(f'{directory} holds no images '
                       f'({", ".join(IMAGE_EXTENSIONS)}): add the images of '
                       f'class {name!r}, or remove the folder.')


def read_folder(root: str, split: str, *, image_size: int, channels: int = 3,
                class_names: tuple[str, ...] | None = None,
                bad_images: str = 'error'
                ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """Images in `root/split/class_name/*.png|jpg`, resized to a square.

  Args:
    root: the dataset folder.
    split: a subfolder ('train', 'test', ...).
    image_size: side every image is resized to (keep it at least the
      training crop).
    channels: 3 (RGB) or 1 (grey).
    class_names: the label order; default the sorted subfolders of the
      split (pass the training split's names for the other splits).
    bad_images: a file that does not decode is an 'error' (naming it), or
      is skipped and counted ('skip').

  Returns:
    images [N, S, S, C] uint8, labels [N] int32, class names.
  """
  folder = os.path.join(root, split)
  if not os.path.isdir(folder):
    raise FileNotFoundError(
        f'No folder {folder!r}: image folders are laid out as '
        f'ROOT/SPLIT/CLASS_NAME/image.png.')
  found = sorted(d for d in os.listdir(folder)
                 if os.path.isdir(os.path.join(folder, d)))
  if class_names is None:
    _check_classes_have_images(folder, found)
  class_names = tuple(class_names or found)
  unknown = sorted(set(found) - set(class_names))
  if unknown:
    raise ValueError(f'{folder} has classes {unknown} that the training '
                     f'split does not have.')
  if bad_images not in BAD_IMAGES:
    raise ValueError(f'config.data.bad_images={bad_images!r}; choose one of '
                     f'{BAD_IMAGES}.')
  images, labels, skipped, undecodable = [], [], 0, []
  for label, name in enumerate(class_names):
    directory = os.path.join(folder, name)
    if not os.path.isdir(directory):
      continue
    for filename in sorted(os.listdir(directory)):
      if not filename.lower().endswith(IMAGE_EXTENSIONS):
        skipped += 1
        continue
      try:
        images.append(read_image(os.path.join(directory, filename),
                                 image_size, channels))
      except BadImageError as e:
        if bad_images != 'skip':
          raise BadImageError(f'{e}. Remove it, or skip such files with '
                              f'--config.data.bad_images=skip.') from e
        undecodable.append(filename)
        continue
      labels.append(label)
  if skipped:
    logging.warning('%s: skipped %d files that are not images (%s).', folder,
                    skipped, ', '.join(IMAGE_EXTENSIONS))
  if undecodable:
    logging.warning('%s: skipped %d image files that do not decode: %s%s',
                    folder, len(undecodable), ', '.join(undecodable[:5]),
                    ' ...' if len(undecodable) > 5 else '')
  if not images:
    raise ValueError(f'No images under {folder}/CLASS_NAME/.')
  return (np.stack(images), np.asarray(labels, np.int32), class_names)
