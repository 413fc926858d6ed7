"""Image augmentation on the accelerator, inside the jitted train step.

The host ships uint8 batches; these functions turn them into float inputs
with random crops, flips, RandAugment-style operations and mixup, drawn from
the step's key (so a resumed run augments exactly as an uninterrupted one,
and the host never becomes the bottleneck). Images are [B, H, W, C] float32
in [0, 1] until `normalize`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array


def to_unit(images: Array) -> Array:
  """uint8 [0, 255] -> float32 [0, 1]."""
  return images.astype(jnp.float32) / 255.0


def normalize(images: Array) -> Array:
  """[0, 1] -> [-1, 1], the value range big_vision's ViTs use."""
  return images * 2.0 - 1.0


def _crop_and_resize(image: Array, box: Array, size: int) -> Array:
  """image [H, W, C], box (top, left, height, width) in pixels -> [S, S, C]."""
  top, left, height, width = box[0], box[1], box[2], box[3]
  scale = jnp.stack([size / height, size / width])
  translation = -jnp.stack([top, left]) * scale
  return jax.image.scale_and_translate(
      image, (size, size, image.shape[-1]), (0, 1), scale, translation,
      method='linear', antialias=True)


def random_resized_crop(key: Array, images: Array, size: int, *,
                        scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> Array:
  """Inception-style crop: a box of random area (fraction of the image in
  `scale`) and aspect ratio (log-uniform in `ratio`) at a random place,
  resized to size x size. Boxes are clipped to the image."""
  b, h, w, _ = images.shape
  area_key, ratio_key, place_key = jax.random.split(key, 3)
  area = jax.random.uniform(area_key, (b,), minval=scale[0],
                            maxval=scale[1]) * h * w
  log_ratio = jax.random.uniform(ratio_key, (b,), minval=math.log(ratio[0]),
                                 maxval=math.log(ratio[1]))
  aspect = jnp.exp(log_ratio)
  height = jnp.clip(jnp.sqrt(area / aspect), 1.0, h)
  width = jnp.clip(jnp.sqrt(area * aspect), 1.0, w)
  place = jax.random.uniform(place_key, (b, 2))
  top, left = place[:, 0] * (h - height), place[:, 1] * (w - width)
  boxes = jnp.stack([top, left, height, width], axis=1)
  return jax.vmap(_crop_and_resize, (0, 0, None))(images, boxes, size)


def random_pad_crop(key: Array, images: Array, padding: int) -> Array:
  """Zero-pad by `padding` pixels and crop back at a random offset (the
  CIFAR augmentation)."""
  b, h, w, _ = images.shape
  padded = jnp.pad(images, ((0, 0), (padding, padding), (padding, padding),
                            (0, 0)))
  offsets = jax.random.randint(key, (b, 2), 0, 2 * padding + 1)
  crop = lambda image, offset: jax.lax.dynamic_slice(
      image, (offset[0], offset[1], 0), (h, w, image.shape[-1]))
  return jax.vmap(crop)(padded, offsets)


def center_crop(images: Array, size: int) -> Array:
  """The central size x size window (evaluation)."""
  _, h, w, _ = images.shape
  if size > min(h, w):
    raise ValueError(f'Cannot centre-crop {size}x{size} from {h}x{w} images; '
                     f'load them at config.data.load_size >= image_size.')
  top, left = (h - size) // 2, (w - size) // 2
  return images[:, top:top + size, left:left + size]


def random_flip(key: Array, images: Array) -> Array:
  """Mirror each image left-right with probability 1/2."""
  flip = jax.random.bernoulli(key, 0.5, (images.shape[0], 1, 1, 1))
  return jnp.where(flip, images[:, :, ::-1], images)


# ----------------------------------------------------------------------------
# RandAugment (Cubuk et al. 2020): N operations per image, each chosen
# uniformly, all at one magnitude M in [0, 10]; M = 0 changes nothing.
# ----------------------------------------------------------------------------


def _grey(image: Array) -> Array:
  return (image @ jnp.asarray([0.299, 0.587, 0.114]))[..., None] \
      if image.shape[-1] == 3 else image


def _affine(image: Array, matrix: Array) -> Array:
  """Output pixel p (centred coordinates) samples the input at matrix @ p;
  outside the image: mid grey."""
  h, w, c = image.shape
  rows, cols = jnp.meshgrid(jnp.arange(h) - (h - 1) / 2,
                            jnp.arange(w) - (w - 1) / 2, indexing='ij')
  source = jnp.einsum('ij,jhw->ihw', matrix, jnp.stack([rows, cols]))
  coordinates = [source[0] + (h - 1) / 2, source[1] + (w - 1) / 2]
  return jnp.stack([jax.scipy.ndimage.map_coordinates(
      image[..., i], coordinates, order=1, mode='constant', cval=0.5)
                    for i in range(c)], axis=-1)


def _operations(image: Array, level: Array, sign: Array) -> list[Array]:
  """Each operation at level in [0, 1] (M / 10), signed where it has a
  direction."""
  h = image.shape[0]
  factor = 1.0 + sign * 0.9 * level
  mean = jnp.mean(_grey(image))
  angle = sign * level * math.pi / 6  # up to 30 degrees
  shear = sign * 0.3 * level
  shift = sign * 0.3 * level * h
  bits = 8 - jnp.round(4 * level)
  step = 2.0**(8 - bits)
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  low = image.min(axis=(0, 1), keepdims=True)
  high = image.max(axis=(0, 1), keepdims=True)
  stretched = jnp.where(high > low, (image - low) / jnp.maximum(high - low,
                                                                1e-6), image)
  return [
      image,  # identity
      image * factor,  # brightness
      mean + factor * (image - mean),  # contrast
      _grey(image) + factor * (image - _grey(image)),  # colour
      jnp.where(image > 1.0 - level, 1.0 - image, image),  # solarize
      jnp.floor(image * 255.0 / step) * step / 255.0,  # posterize
      image + level * (stretched - image),  # autocontrast, blended by level
      _affine(image, jnp.asarray([[cos, -sin], [sin, cos]])),  # rotate
      _affine(image, jnp.asarray([[1.0, 0.0], [shear, 1.0]])),  # shear x
      _affine(image, jnp.asarray([[1.0, shear], [0.0, 1.0]])),  # shear y
      _pad_shift(image, shift, axis=1),  # translate x
      _pad_shift(image, shift, axis=0),  # translate y
  ]


def _pad_shift(image: Array, shift: Array, axis: int) -> Array:
  """Translation by `shift` pixels (rounded) along an axis, grey fill."""
  n = image.shape[axis]
  offset = jnp.round(shift).astype(jnp.int32)
  index = jnp.arange(n) - offset
  inside = (index >= 0) & (index < n)
  moved = jnp.take(image, jnp.clip(index, 0, n - 1), axis=axis)
  shape = [1, 1, 1]
  shape[axis] = n
  return jnp.where(inside.reshape(shape), moved, 0.5)


NUM_OPERATIONS = 12


def rand_augment(key: Array, images: Array, *, num_layers: int,
                 magnitude: float) -> Array:
  """`num_layers` random operations per image at `magnitude` (0-10)."""
  level = jnp.asarray(magnitude / 10.0, jnp.float32)

  def one(image, key):
    for layer_key in jax.random.split(key, num_layers):
      choice_key, sign_key = jax.random.split(layer_key)
      choice = jax.random.randint(choice_key, (), 0, NUM_OPERATIONS)
      sign = jnp.where(jax.random.bernoulli(sign_key), 1.0, -1.0)
      image = jnp.clip(jnp.stack(_operations(image, level, sign))[choice],
                       0.0, 1.0)
    return image

  return jax.vmap(one)(images, jax.random.split(key, images.shape[0]))


def mixup(key: Array, images: Array, targets: Array, alpha: float
          ) -> tuple[Array, Array]:
  """Zhang et al. 2018: one lambda ~ Beta(alpha, alpha) per batch; each
  image and its target distribution mixed with those of the batch in
  reverse order."""
  lam = jax.random.beta(key, alpha, alpha)
  return (lam * images + (1 - lam) * images[::-1],
          lam * targets + (1 - lam) * targets[::-1])
