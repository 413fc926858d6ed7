"""Hostile or damaged published files are refused in one line naming the
file, never read outside the model folder, never a library traceback."""

import json
import os
import struct

import numpy as np
import pytest

from transformer.interop import files

safetensors_numpy = pytest.importorskip('safetensors.numpy')


def write_safetensors(path, header, data=b'\0' * 8, length=None):
  """A safetensors file: 8-byte little-endian header length, the JSON
  header, the data."""
  text = json.dumps(header).encode()
  with open(path, 'wb') as f:
    f.write(struct.pack('<Q', len(text) if length is None else length) +
            text + data)


TENSOR = {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}


@pytest.mark.parametrize('case,message', [
    ('header length beyond the file', 'invalid header length'),
    ('offsets outside the data', 'not fully covered'),
    ('unknown dtype', 'Q99'),
    ('not a safetensors file', 'header too small'),
])
def test_malformed_safetensors_are_refused_naming_the_file(tmp_path, case,
                                                           message):
  path = tmp_path / 'model.safetensors'
  if case == 'header length beyond the file':
    write_safetensors(path, {'w': TENSOR}, length=10**6)
  elif case == 'offsets outside the data':
    write_safetensors(path, {'w': {**TENSOR, 'shape': [200],
                                   'data_offsets': [0, 800]}})
  elif case == 'unknown dtype':
    write_safetensors(path, {'w': {**TENSOR, 'dtype': 'Q99'}})
  else:
    path.write_bytes(b'<html>')
  with pytest.raises(ValueError) as error:
    files.read_safetensors(str(tmp_path))
  assert str(path) in str(error.value) and message in str(error.value)
  assert 'download it again' in str(error.value)


def test_a_valid_file_reads(tmp_path):
  write_safetensors(tmp_path / 'model.safetensors', {'w': TENSOR},
                    data=np.asarray([1.5, -2.0], '<f4').tobytes())
  np.testing.assert_array_equal(
      files.read_safetensors(str(tmp_path))['w'], [1.5, -2.0])


def test_a_shard_outside_the_model_folder_is_refused(tmp_path):
  model = tmp_path / 'model'
  model.mkdir()
  outside = tmp_path / 'secret.safetensors'
  safetensors_numpy.save_file({'w': np.ones(2, np.float32)}, str(outside))
  for shard in ('../secret.safetensors', str(outside), 'sub/../../secret'
                '.safetensors'):
    (model / 'model.safetensors.index.json').write_text(
        json.dumps({'weight_map': {'w': shard}}))
    with pytest.raises(ValueError, match='not a file of .*refused'):
      files.read_safetensors(str(model))
  safetensors_numpy.save_file({'w': np.ones(2, np.float32)},
                              str(model / 'model-1.safetensors'))
  (model / 'model.safetensors.index.json').write_text(
      json.dumps({'weight_map': {'w': 'model-1.safetensors'}}))
  assert list(files.read_safetensors(str(model))) == ['w']


def test_missing_shards_and_garbled_json_name_the_file(tmp_path):
  (tmp_path / 'model.safetensors.index.json').write_text(
      json.dumps({'weight_map': {'w': 'model-1.safetensors'}}))
  with pytest.raises(FileNotFoundError, match='model-1.safetensors'):
    files.read_safetensors(str(tmp_path))
  (tmp_path / 'model.safetensors.index.json').write_text('{"weight_map": ')
  with pytest.raises(ValueError, match='index.json is not valid JSON'):
    files.read_safetensors(str(tmp_path))
  (tmp_path / 'config.json').write_text('[1, 2]')
  with pytest.raises(ValueError, match='config.json holds a list'):
    files.read_config(str(tmp_path))
  with pytest.raises(FileNotFoundError, match='config.json not found'):
    files.read_config(str(tmp_path / 'nowhere'))
  os.remove(tmp_path / 'model.safetensors.index.json')
  with pytest.raises(FileNotFoundError, match='only safetensors'):
    files.read_safetensors(str(tmp_path))
