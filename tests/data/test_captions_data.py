"""Captioning data: the offline two-object scenes and caption folders
(TFDS: e2e/test_captions_data_e2e.py)."""

import itertools
import logging
import os
import re

import numpy as np
import pytest

from conftest import raises_naming
from transformer.data import captions

_OBJECT = (f"a ({'|'.join(captions.COLOURS)}) "
           f"({'|'.join(captions.SHAPES)})")
_CAPTION = re.compile(
    f'{_OBJECT} (left of|right of|above|below) {_OBJECT}')
_INVERSE = {'left of': 'right of', 'right of': 'left of', 'above': 'below',
            'below': 'above'}


@pytest.fixture(name='scenes', scope='module')
def fixture_scenes():
  return captions.offline_captions(500, seed=0)


def parse(reference):
  """'a red circle left of a blue ring' -> (red, circle), rel, (blue, ring)."""
  match = _CAPTION.fullmatch(reference)
  assert match, reference
  colour, shape, relation, other_colour, other_shape = match.groups()
  return (colour, shape), relation, (other_colour, other_shape)


def test_offline_captions_are_deterministic_per_seed(scenes):
  x, references = scenes
  again, same = captions.offline_captions(500, seed=0)
  other, different = captions.offline_captions(500, seed=1)
  assert x.shape == (500, 32, 32, 3) and x.dtype == np.uint8
  np.testing.assert_array_equal(x, again)
  assert references == same
  assert np.abs(x.astype(int) - other).mean() > 10
  assert sum(a != b for a, b in zip(references, different)) > 450
  assert captions.offline_captions(3, seed=0, image_size=20)[0].shape == (
      3, 20, 20, 3)


def test_two_references_describe_one_pair_from_both_sides(scenes):
  for first, second in scenes[1]:
    a, relation, b = parse(first)
    assert parse(second) == (b, _INVERSE[relation], a)
    assert a != b  # never the same (colour, shape) twice in a scene


def test_every_pair_and_layout_occurs(scenes):
  objects, relations = set(), set()
  for first, _ in scenes[1]:
    a, relation, b = parse(first)
    objects |= {a, b}
    relations.add(relation)
  assert objects == set(itertools.product(captions.COLOURS, captions.SHAPES))
  # The first reference names the left (top) object first.
  assert relations == {'left of', 'above'}


def nearest_colour(pixels):
  """Per pixel [..., 3] the index of the nearest named colour, or -1 where
  none is within 60 (background)."""
  palette = np.array(list(captions.COLOURS.values()))
  distance = np.linalg.norm(pixels[..., None, :].astype(float) - palette,
                            axis=-1)
  return np.where(distance.min(-1) < 60, distance.argmin(-1), -1)


def test_the_colour_words_are_where_the_relation_says(scenes):
  """The object named first is the one in the half its relation names: its
  colour is the most common named colour there."""
  halves = {'left of': np.s_[:, :16], 'right of': np.s_[:, 16:],
            'above': np.s_[:16, :], 'below': np.s_[16:, :]}
  names = list(captions.COLOURS)
  for image, pair in zip(*scenes):
    for reference in pair:
      (colour, _), relation, (other, _) = parse(reference)
      for name, half in ((colour, halves[relation]),
                         (other, halves[_INVERSE[relation]])):
        counts = np.bincount(nearest_colour(image[half]).ravel() + 1,
                             minlength=len(names) + 1)[1:]
        assert names[counts.argmax()] == name, reference
        assert counts.sum() == counts.max() >= 10, reference


def write_folder(root):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  folder = root / 'train'
  folder.mkdir()
  Image.new('RGB', (12, 8), (255, 0, 0)).save(folder / 'red.png')
  Image.new('RGB', (8, 8), (0, 0, 255)).save(folder / 'blue.jpg')
  Image.new('RGB', (8, 8), (0, 255, 0)).save(folder / 'green.png')
  (folder / 'captions.tsv').write_text(
      'red.png\tA Red field \n\nblue.jpg\tblue\nred.png\tred again\n',
      encoding='utf-8')
  return folder


def test_caption_folder_round_trip(tmp_path, caplog):
  write_folder(tmp_path)
  with caplog.at_level(logging.WARNING):
    x, references, names = captions.read_caption_folder(
        str(tmp_path), 'train', image_size=6)
  assert names == ['blue.jpg', 'red.png'] and x.shape == (2, 6, 6, 3)
  assert references == [['blue'], ['A Red field', 'red again']]
  assert x[1, ..., 0].min() == 255 and x[1, ..., 1:].max() == 0
  assert x[0, ..., 2].min() > 240  # a JPEG, not exact
  assert 'skipped 1 images without a caption' in caplog.text
  assert 'green.png' in caplog.text
  grey, _, _ = captions.read_caption_folder(str(tmp_path), 'train',
                                            image_size=6, channels=1)
  assert grey.shape == (2, 6, 6, 1)


@pytest.mark.parametrize('lines, error, message', [
    (None, FileNotFoundError, ('train/captions.tsv',
                               'ROOT/SPLIT/captions.tsv')),
    ('red.png\tred\nred.png red\n', ValueError, ('captions.tsv line 2',
                                                 'no tab', 'a tab')),
    ('red.png\t  \n', ValueError, ('captions.tsv line 1', "'red.png'",
                                   'empty', 'remove the line')),
    ('red.png\tred\n\nnone.png\tno\n', FileNotFoundError,
     ('captions.tsv line 3', "'none.png'", 'add the image')),
    ('\n', ValueError, ('captions.tsv', 'no captions',
                        'ROOT/SPLIT/captions.tsv')),
])
def test_caption_folder_errors_name_the_line_and_the_fix(
    tmp_path, lines, error, message):
  folder = write_folder(tmp_path)
  if lines is None:
    os.remove(folder / 'captions.tsv')
  else:
    (folder / 'captions.tsv').write_text(lines, encoding='utf-8')
  with raises_naming(error, *message):
    captions.read_caption_folder(str(tmp_path), 'train', image_size=6)


def test_caption_folder_without_the_split(tmp_path):
  with raises_naming(FileNotFoundError, str(tmp_path / 'val'),
                     'ROOT/SPLIT/captions.tsv'):
    captions.read_caption_folder(str(tmp_path), 'val', image_size=6)
