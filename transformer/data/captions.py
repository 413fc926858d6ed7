"""Image captioning data without TensorFlow: generated two-object scenes
with their captions, and folders of images with a captions file.

Every source returns images uint8 [N, S, S, C] and, per image, a list of
reference captions. `tfds_reader.load_captions` reads TFDS coco_captions.
"""

from __future__ import annotations

import os

from absl import logging
import numpy as np

from transformer.data import images
from transformer.data import reading

# Named colours far apart from each other and from the grey backgrounds
# (at most 45% grey), so that a colour word names one thing to look for.
COLOURS = {
    'red': (230, 40, 40),
    'green': (40, 200, 60),
    'blue': (50, 90, 240),
    'yellow': (240, 220, 40),
    'white': (245, 245, 245),
    'purple': (160, 60, 220),
}

# Caption word -> `images._shape_mask` region.
_SHAPE_MASKS = {
    'circle': 'circle',
    'square': 'square',
    'triangle': 'triangle_up',
    'diamond': 'diamond',
    'plus': 'plus',
    'ring': 'ring',
}
SHAPES = tuple(_SHAPE_MASKS)

# (first object's relation, second object's): side by side the first object
# is the left one, stacked the top one.
RELATIONS = {'side_by_side': ('left of', 'right of'),
             'stacked': ('above', 'below')}
LAYOUTS = tuple(RELATIONS)


def caption(first: tuple[str, str], relation: str,
            second: tuple[str, str]) -> str:
  """'a red circle left of a blue square' for objects (colour, shape)."""
  return f'a {first[0]} {first[1]} {relation} a {second[0]} {second[1]}'


def offline_captions(num_examples: int, seed: int, *, image_size: int = 32
                     ) -> tuple[np.ndarray, list[list[str]]]:
  """Generated scenes of two coloured shapes and how they are placed.

  Each image: a random dark to mid grey background, two objects, each a
  (colour, shape) pair (`COLOURS`, `SHAPES`; never the same pair twice in
  one scene) of random size (radius 15-22% of the image). The objects are
  side by side (one anywhere in the left half, the other in the right
  half) or stacked (top and bottom halves), each wholly inside its half;
  then a little Gaussian pixel noise. The two references describe the pair
  from either side: 'a red circle left of a blue square' and 'a blue square
  right of a red circle' (stacked: 'above', 'below'), so a captioner must
  look at the right half for each word. Deterministic in (num_examples,
  seed); different seeds give different scenes (use one seed per split).

  Returns:
    images [N, S, S, 3] uint8; per image two references, lower case words
    separated by single spaces, the first naming the left (top) object
    first.
  """
  rng = np.random.default_rng([seed, 90_911])
  n, s = num_examples, image_size
  # Object k of a scene is pair (colour, shape) = divmod(pair[:, k], shapes);
  # the second is drawn from the other pairs, uniformly.
  num_pairs = len(COLOURS) * len(SHAPES)
  pair = rng.integers(0, num_pairs, (n, 1))
  pair = np.concatenate(
      [pair, (pair + rng.integers(1, num_pairs, (n, 1))) % num_pairs], 1)
  colour, shape = np.divmod(pair, len(SHAPES))  # [N, 2] each
  stacked = rng.integers(0, 2, n).astype(bool)
  radius = rng.uniform(0.15, 0.22, (n, 2)) * s
  # Along the axis that splits the image, each object stays in its half.
  along = rng.uniform(0, 1, (n, 2)) * (s / 2 - 2 * radius) + radius \
      + np.array([0, s / 2])
  across = rng.uniform(0, 1, (n, 2)) * (s - 2 * radius) + radius
  x = np.where(stacked[:, None], across, along)
  y = np.where(stacked[:, None], along, across)
  background = rng.uniform(0.0, 0.45, (n, 1, 1, 1)) * 255
  scene = np.broadcast_to(background, (n, s, s, 3)).copy()
  rows, cols = np.meshgrid(np.arange(s) + 0.5, np.arange(s) + 0.5,
                           indexing='ij')
  palette = np.array(list(COLOURS.values()), np.float64)
  for k in range(2):
    u = (cols[None] - x[:, k, None, None]) / radius[:, k, None, None]
    v = (rows[None] - y[:, k, None, None]) / radius[:, k, None, None]
    mask = np.zeros((n, s, s), bool)
    for index, name in enumerate(SHAPES):
      chosen = shape[:, k] == index
      mask[chosen] = images._shape_mask(  # pylint: disable=protected-access
          _SHAPE_MASKS[name], u[chosen], v[chosen])
    scene = np.where(mask[..., None], palette[colour[:, k], None, None],
                     scene)
  noise = rng.uniform(0.02, 0.06, (n, 1, 1, 1)) * 255
  scene = scene + noise * rng.standard_normal(scene.shape)
  scene = np.clip(np.round(scene), 0, 255).astype(np.uint8)
  colour_names = list(COLOURS)
  references = []
  for i in range(n):
    first, second = ((colour_names[colour[i, k]], SHAPES[shape[i, k]])
                     for k in range(2))
    relation, inverse = RELATIONS[LAYOUTS[int(stacked[i])]]
    references.append([caption(first, relation, second),
                       caption(second, inverse, first)])
  return scene, references


CAPTIONS_FILE = 'captions.tsv'
_LAYOUT = (f'caption folders are laid out as ROOT/SPLIT/image.png with '
           f'ROOT/SPLIT/{CAPTIONS_FILE}: one line per caption, the image '
           f'file name, a tab, the caption')


def _leaves_folder(name: str) -> bool:
  """Whether a name in a captions file points outside its folder (a
  captions file must not make the reader open files elsewhere)."""
  return os.path.isabs(name) or os.pardir in name.replace('\\', '/').split('/')


def _read_captions_file(folder: str) -> dict[str, list[str]]:
  """Image file name -> its captions, from `folder`/captions.tsv."""
  path = os.path.join(folder, CAPTIONS_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'No {path}: {_LAYOUT}.')
  references = {}
  for number, line in enumerate(reading.lines(path), 1):
    line = line.rstrip('\r')  # written on Windows
    if not line.strip():
      continue
    if '\t' not in line:
      raise ValueError(
          f'{path} line {number} has no tab: write the image file name, a '
          f'tab, then the caption.')
    name, words = (part.strip() for part in line.split('\t', 1))
    if not words:
      raise ValueError(f'{path} line {number}: the caption of {name!r} is '
                       f'empty; remove the line or write the caption.')
    if _leaves_folder(name):
      raise ValueError(
          f'{path} line {number} names {name!r}, outside {folder}; name the '
          f'images by their paths inside that folder.')
    if not os.path.isfile(os.path.join(folder, name)):
      raise FileNotFoundError(
          f'{path} line {number} captions {name!r}, which is not a file in '
          f'{folder}; correct the name or add the image.')
    references.setdefault(name, []).append(words)
  if not references:
    raise ValueError(f'{path} has no captions; {_LAYOUT}.')
  return references


def read_caption_folder(root: str, split: str, *, image_size: int,
                        channels: int = 3
                        ) -> tuple[np.ndarray, list[list[str]], list[str]]:
  """Images in `root/split/` with their captions in `root/split/captions.tsv`.

  Each line of the UTF-8 captions file is `image_file_name<TAB>caption`; an
  image with several lines has several references. Captions are stripped,
  their case kept. Images that no line names are skipped and counted.

  Args:
    root: the dataset folder.
    split: a subfolder ('train', 'val', ...).
    image_size: side every image is resized to (`images.square`).
    channels: 3 (RGB) or 1 (grey).

  Returns:
    images [N, S, S, C] uint8, per image its references, and the image file
    names, in sorted order of the names.

  Raises:
    FileNotFoundError: no folder or captions file, or a caption names an
      image that is not there.
    ValueError: a line without a tab, an empty caption, no captions.
    images.BadImageError: a named image file does not decode.
  """
  folder = os.path.join(root, split)
  if not os.path.isdir(folder):
    raise FileNotFoundError(f'No folder {folder!r}: {_LAYOUT}.')
  references = _read_captions_file(folder)
  names = sorted(references)
  uncaptioned = [name for name in os.listdir(folder)
                 if name.lower().endswith(images.IMAGE_EXTENSIONS)
                 and name not in references]
  if uncaptioned:
    logging.warning('%s: skipped %d images without a caption in %s: %s%s',
                    folder, len(uncaptioned), CAPTIONS_FILE,
                    ', '.join(sorted(uncaptioned)[:5]),
                    ' ...' if len(uncaptioned) > 5 else '')
  pictures = np.stack([
      images.read_image(os.path.join(folder, name), image_size, channels)
      for name in names])
  return pictures, [references[name] for name in names], names
