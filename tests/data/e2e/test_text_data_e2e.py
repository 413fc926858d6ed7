"""Language-modelling data from TFDS (mock data, a missing dataset's
error), and importing the text data without TensorFlow."""

import subprocess
import sys

import pytest

from conftest import raises_naming
from conftest import REPO
from transformer.data import tfds_reader


@pytest.fixture(name='tfds', scope='module')
def fixture_tfds():
  return pytest.importorskip('tensorflow_datasets')


def test_load_text_under_mock_data(tfds):
  with tfds.testing.mock_data(num_examples=5):
    texts = tfds_reader.load_text('lm1b', 'train', data_dir=None)
    validation = tfds_reader.load_text('lm1b', 'val', data_dir=None,
                                       max_examples=2)
    with raises_naming(ValueError, "'sentence'", "['text']"):
      tfds_reader.load_text('lm1b', 'test', None, feature='sentence')
  assert len(texts) == 5 and all(isinstance(t, str) and t for t in texts)
  # mock_data serves the same examples for every split.
  assert validation == texts[:2]


def test_missing_lm1b_raises_one_clear_error(tfds, tmp_path):
  del tfds  # Imported for the skip only; no mock here.
  data_dir = str(tmp_path / 'empty')
  with pytest.raises(tfds_reader.DatasetNotFoundError) as info:
    tfds_reader.load_text('lm1b', 'train', data_dir=data_dir)
  assert "'lm1b'" in str(info.value)
  assert f'tfds build lm1b --data_dir={data_dir}' in str(info.value)
  assert info.value.__cause__ is None and info.value.__suppress_context__
  with raises_naming(tfds_reader.DatasetNotFoundError, "'no_such_text'",
                     'datasets/catalog', 'e.g. lm1b'):
    tfds_reader.load_text('no_such_text', 'train', data_dir=data_dir)


def test_importing_text_does_not_import_tensorflow():
  code = ('import sys, transformer.data.text, transformer.data.tokenization; '
          'print(sorted(m for m in sys.modules if m.startswith("tensorflow")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True, cwd=REPO).stdout
  assert out.strip() == '[]'
