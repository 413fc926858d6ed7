"""Captioning data from TFDS: mock data, and a tiny prepared dataset whose
validation split is called 'val'."""

import numpy as np
import pytest

from conftest import raises_naming
from transformer.data import tfds_reader


def test_load_captions_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=4):
    x, references = tfds_reader.load_captions('coco_captions', 'val', None,
                                               image_size=16)
    two, _ = tfds_reader.load_captions('coco_captions', 'train', None,
                                       image_size=16, max_examples=2)
    with raises_naming(ValueError, 'mnist', "['image', 'label']",
                       '"image" and "captions"'):
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
  with raises_naming(tfds_reader.DatasetNotFoundError, "'coco_captions'",
                     'tfds build coco_captions --data_dir='
                     f"{tmp_path / 'none'}"):
    tfds_reader.load_captions('coco_captions', 'val', str(tmp_path / 'none'),
                              image_size=4)
