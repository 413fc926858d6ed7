"""Captioning data: the offline two-object scenes, caption folders, TFDS."""

import itertools
import logging
import os
import re

import numpy as np
import pytest

from transformer.data import captions
from transformer.data import tfds_reader

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
    (None, FileNotFoundError, r'No .*captions\.tsv: caption folders'),
    ('red.png\tred\nred.png red\n', ValueError, 'line 2 has no tab'),
    ('red.png\t  \n', ValueError, "line 1: the caption of 'red.png' is empty"),
    ('red.png\tred\n\nnone.png\tno\n', FileNotFoundError,
     "line 3 captions 'none.png', which is not a file"),
    ('\n', ValueError, 'has no captions'),
])
def test_caption_folder_errors_name_the_line_and_the_fix(
    tmp_path, lines, error, message):
  folder = write_folder(tmp_path)
  if lines is None:
    os.remove(folder / 'captions.tsv')
  else:
    (folder / 'captions.tsv').write_text(lines, encoding='utf-8')
  with pytest.raises(error, match=message):
    captions.read_caption_folder(str(tmp_path), 'train', image_size=6)


def test_caption_folder_without_the_split(tmp_path):
  with pytest.raises(FileNotFoundError, match='ROOT/SPLIT/captions.tsv'):
    captions.read_caption_folder(str(tmp_path), 'val', image_size=6)


def test_load_captions_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=4):
    x, references = tfds_reader.load_captions('coco_captions', 'val', None,
                                               image_size=16)
    two, _ = tfds_reader.load_captions('coco_captions', 'train', None,
                                       image_size=16, max_examples=2)
    with pytest.raises(ValueError, match='needs "image" and "captions"'):
      tfds_reader.load_captions('mnist', 'train', None, image_size=16)
  assert x.shape == (4, 16, 16, 3) and x.dtype == np.uint8
  assert len(two) == 2 and len(references) == 4
  assert all(refs and all(isinstance(r, str) for r in refs)
             for refs in references)


def test_load_captions_reads_a_split_called_val(tmp_path):
  """The unmocked path on a tiny prepared dataset whose validation split is
  called 'val', as coco_captions' is (not the alias of 'validation')."""
  tfds = pytest.importorskip('tensorflow_datasets')
  pixels = np.zeros((6, 4, 3), np.uint8)
  texts = {'train': [['one', 'two'], ['three']], 'val': [['Caf\u00e9 noir']]}

  with tfds.core.registered.skip_registration():

    class ToyCaptions(tfds.core.GeneratorBasedBuilder):
      VERSION = tfds.core.Version('1.0.0')

      def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=(
            tfds.features.FeaturesDict({
                'image': tfds.features.Image(shape=(None, None, 3)),
                'captions': tfds.features.Sequence({'text': np.str_}),
            })))

      def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_examples(refs)
                for split, refs in texts.items()}

      def _generate_examples(self, refs):
        for i, captions_ in enumerate(refs):
          yield i, {'image': pixels,
                    'captions': [{'text': t} for t in captions_]}

  ToyCaptions(data_dir=str(tmp_path)).download_and_prepare()
  x, references = tfds_reader.load_captions('toy_captions', 'val',
                                            str(tmp_path), image_size=4)
  assert x.shape == (1, 4, 4, 3) and references == texts['val']
  _, train = tfds_reader.load_captions('toy_captions', 'train',
                                       str(tmp_path), image_size=4)
  assert sorted(train) == sorted(texts['train'])
  with pytest.raises(tfds_reader.DatasetNotFoundError, match='tfds build'):
    tfds_reader.load_captions('coco_captions', 'val', str(tmp_path / 'none'),
                              image_size=4)
