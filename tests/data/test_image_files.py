"""Image and idx files fuzzed as the other readers are (test_reading.py):
random truncations and byte flips of a real file give the image (or
array) or one error naming the file, never another exception."""

import gzip
import io

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
from PIL import Image
import pytest

from conftest import write_idx
from transformer.data import images

_DAMAGE = dict(cut=st.integers(0, 4_000), flips=st.lists(
    st.tuples(st.integers(0, 4_000), st.integers(1, 255)), max_size=3))
_SETTINGS = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def _damaged(data: bytes, cut: int, flips) -> bytes:
  damaged = bytearray(data[:cut] if cut < len(data) else data)
  for at, bits in flips:
    if at < len(damaged):
      damaged[at] ^= bits
  return bytes(damaged)


def _encoded(kind: str) -> bytes:
  rng = np.random.default_rng(0)
  buffer = io.BytesIO()
  Image.fromarray(rng.integers(0, 256, (24, 20, 3), np.uint8)).save(
      buffer, format=kind)
  return buffer.getvalue()


@pytest.mark.parametrize('kind', ['PNG', 'JPEG', 'GIF', 'BMP'])
@_SETTINGS
@given(**_DAMAGE)
def test_a_damaged_image_decodes_or_is_named(tmp_path, kind, cut, flips):
  path = tmp_path / f'image.{kind.lower()}'
  path.write_bytes(_damaged(_encoded(kind), cut, flips))
  try:
    array = images.read_image(str(path), image_size=16)
  except images.BadImageError as e:
    assert str(path) in str(e) and '\n' not in str(e).strip()
  else:
    assert array.shape == (16, 16, 3) and array.dtype == np.uint8


@_SETTINGS
@given(**_DAMAGE)
def test_a_damaged_idx_file_reads_or_is_named(tmp_path, cut, flips):
  path = tmp_path / 'train-images-idx3-ubyte'
  raw = tmp_path / 'raw'
  raw.mkdir(exist_ok=True)
  write_idx(str(raw / 'a.gz'), np.arange(75, dtype=np.uint8).reshape(3, 5, 5))
  data = gzip.decompress((raw / 'a.gz').read_bytes())
  path.write_bytes(_damaged(data, cut, flips))
  try:
    array = images._read_idx(str(path))  # pylint: disable=protected-access
  except ValueError as e:
    assert str(path) in str(e)
  else:
    assert array.dtype == np.uint8
