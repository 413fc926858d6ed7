"""Data sources from TFDS (mock data, a tiny prepared dataset, the errors
of a missing one), and importing the data sources without TensorFlow."""

import functools
import subprocess
import sys

import pytest

from conftest import prepare_translation_dataset
from conftest import raises_naming
from conftest import REPO
from transformer.data import tfds_reader


@pytest.fixture(name='tfds', scope='module')
def fixture_tfds():
  return pytest.importorskip('tensorflow_datasets')


def test_load_translation_under_mock_data_in_both_directions(tfds):
  with tfds.testing.mock_data(num_examples=5):
    en_de = tfds_reader.load_translation('wmt14_translate/de-en', 'validation',
                                         'en', 'de', data_dir=None)
    de_en = tfds_reader.load_translation('wmt14_translate/de-en', 'val', 'de',
                                         'en', data_dir=None)
    first_two = tfds_reader.load_translation(
        'wmt14_translate/de-en', 'train', 'en', 'de', data_dir=None,
        max_examples=2)
  assert len(en_de) == 5
  assert all(isinstance(s, str) and isinstance(t, str) and s and t
             for s, t in en_de)
  # mock_data yields the same examples on each call, so the directions are
  # swaps of each other.
  assert de_en == [(t, s) for s, t in en_de]
  assert first_two == en_de[:2]


def test_load_translation_reads_a_prepared_dataset(tfds, tmp_path):
  """The unmocked path, on a tiny dataset prepared in tmp_path."""
  pairs = [('ein Hund', 'a dog'), ('zwei Katzen', 'two cats'),
           ('Mädchen', 'girl')]

  # Left unregistered, so that load_translation finds it from its files, as
  # it finds a WMT dataset prepared by `tfds build`.
  data_dir = str(tmp_path)
  prepare_translation_dataset('ToyTranslate', data_dir,
                              {'train': pairs, 'validation': pairs[:1]})
  load = functools.partial(tfds_reader.load_translation, 'toy_translate/de-en',
                           data_dir=data_dir)
  # TFDS orders examples by a hash of their keys, not as generated.
  assert sorted(load('train', 'en', 'de')) == sorted(
      (en, de) for de, en in pairs)
  assert load('val', 'de', 'en') == pairs[:1]
  first_two = load('train', 'de', 'en', max_examples=2)
  assert len(first_two) == 2 and set(first_two) < set(pairs)


def test_unknown_language_is_named(tfds):
  with tfds.testing.mock_data(num_examples=1):
    with raises_naming(ValueError, "'fr'", "['de', 'en']"):
      tfds_reader.load_translation('wmt14_translate/de-en', 'train', 'fr',
                                   'en', data_dir=None)


def test_unprepared_dataset_raises_one_clear_error(tfds, tmp_path):
  del tfds  # Imported for the skip only; no mock here.
  data_dir = str(tmp_path / 'empty')
  with pytest.raises(tfds_reader.DatasetNotFoundError) as info:
    tfds_reader.load_translation('wmt14_translate/de-en', 'train', 'en', 'de',
                                 data_dir=data_dir)
  message = str(info.value)
  assert "'wmt14_translate/de-en'" in message
  assert f'tfds build wmt14_translate/de-en --data_dir={data_dir}' in message
  assert 'download_and_prepare()' in message
  # One error, not a chain leading into TFDS internals.
  assert info.value.__cause__ is None and info.value.__suppress_context__
  with raises_naming(tfds_reader.DatasetNotFoundError,
                     "'no_such_dataset/de-en'", 'datasets/catalog',
                     'e.g. wmt14_translate/de-en'):
    tfds_reader.load_translation('no_such_dataset/de-en', 'train', 'en', 'de',
                                 data_dir=data_dir)


def test_unprepared_dataset_names_the_default_data_dir(tfds, tmp_path,
                                                       monkeypatch):
  # Stands in for ~/tensorflow_datasets, which may hold real data.
  monkeypatch.setattr(tfds.core.constants, 'DATA_DIR', str(tmp_path))
  with pytest.raises(tfds_reader.DatasetNotFoundError) as info:
    tfds_reader.load_translation('wmt17_translate/de-en', 'test', 'de', 'en',
                                 data_dir=None)
  assert str(tmp_path) in str(info.value)
  assert 'TFDS_DATA_DIR' in str(info.value)


def test_importing_the_data_sources_does_not_import_tensorflow():
  code = ('import sys, transformer.data.tfds_reader, '
          'transformer.data.generated.offline_mt, transformer.data.parallel_text; '
          'print(sorted(m for m in sys.modules if m.startswith("tensorflow")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True, cwd=REPO).stdout
  assert out.strip() == '[]'
