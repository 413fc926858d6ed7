"""The original vision_transformer .npz checkpoints (no torch needed): a file
written with the original names and shapes loads into our ViT; `convert`
checks the converted tensors against the model and the written workdir by
restoring it, and leaves nothing behind when a check fails."""

import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from transformer import workdir as workdir_lib
from transformer.interop import vit as vit_interop
from transformer.interop import workdirs
from transformer.models import vit


def original_arrays(params, num_layers):
  """Our parameters under the original flax model's names."""
  arrays = {'cls': params['cls'],
            'embedding/kernel': params['embedding']['kernel'],
            'embedding/bias': params['embedding']['bias'],
            'Transformer/posembed_input/pos_embedding':
                params['pos_embedding'],
            'head/kernel': params['head']['kernel'],
            'head/bias': params['head']['bias']}
  encoder = params['encoder']
  arrays['Transformer/encoder_norm/scale'] = encoder['final_norm']['scale']
  arrays['Transformer/encoder_norm/bias'] = encoder['final_norm']['bias']
  for i in range(num_layers):
    ours, block = encoder[f'layer_{i}'], f'Transformer/encoderblock_{i}/'
    for norm, sub in (('LayerNorm_0', 'attention_sublayer'),
                      ('LayerNorm_2', 'mlp_sublayer')):
      for field in ('scale', 'bias'):
        arrays[f'{block}{norm}/{field}'] = ours[sub]['norm'][field]
    for name in ('query', 'key', 'value', 'out'):
      for field in ('kernel', 'bias'):
        arrays[f'{block}MultiHeadDotProductAttention_1/{name}/{field}'] = (
            ours['self_attention'][name][field])
    for dense, ours_name in (('Dense_0', 'wi'), ('Dense_1', 'wo')):
      for field in ('kernel', 'bias'):
        arrays[f'{block}MlpBlock_3/{dense}/{field}'] = ours['mlp'][
            ours_name][field]
  return {k: np.asarray(v) for k, v in arrays.items()}


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
  config = vit.config_for('Ti/8', image_size=32, num_classes=5, num_layers=2)
  model = vit.VisionTransformer(config)
  params = nn.unbox(model.init(jax.random.key(0), jnp.ones((1, 32, 32, 3)),
                               deterministic=True))['params']
  # Non-zero head and class token, so that the comparison sees them.
  params = jax.tree.map(
      lambda x: x + 0.01 * jax.random.normal(jax.random.key(1), x.shape),
      params)
  path = tmp_path_factory.mktemp('npz') / 'ViT-Ti_8.npz'
  np.savez(path, **original_arrays(params, 2))
  return config, params, str(path)


def test_npz_loads_with_its_config_and_the_same_outputs(checkpoint):
  config, params, path = checkpoint
  loaded_config, loaded = vit_interop.load_npz(path)
  for field in ('num_layers', 'd_model', 'num_heads', 'd_ff', 'image_size',
                'patch_size', 'num_classes'):
    assert getattr(loaded_config, field) == getattr(config, field), field
  images = jax.random.normal(jax.random.key(2), (2, 32, 32, 3))
  ours = vit.VisionTransformer(config).apply({'params': params}, images,
                                             deterministic=True)
  theirs = vit.VisionTransformer(loaded_config).apply(
      {'params': loaded}, images, deterministic=True)
  np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-6)


def test_npz_resized_to_a_new_resolution(checkpoint):
  config, params, path = checkpoint
  loaded_config, loaded = vit_interop.load_npz(path, image_size=48)
  assert loaded_config.image_size == 48
  assert loaded['pos_embedding'].shape == (1, 1 + 6 * 6, config.d_model)
  np.testing.assert_array_equal(loaded['pos_embedding'][:, 0],
                                params['pos_embedding'][:, 0])
  logits = vit.VisionTransformer(loaded_config).apply(
      {'params': loaded}, jnp.ones((1, 48, 48, 3)), deterministic=True)
  assert logits.shape == (1, 5)


def test_npz_with_a_wrong_array_lists_it(checkpoint, tmp_path):
  _, _, path = checkpoint
  with np.load(path) as data:
    arrays = dict(data)
  arrays['Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias'] = np.zeros(3)
  broken = tmp_path / 'broken.npz'
  np.savez(broken, **arrays)
  with raises_naming(ValueError, str(broken),
                     'Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias',
                     'expected (768,)', 'found (3,)'):
    vit_interop.load_npz(str(broken))
  arrays['pre_logits/kernel'] = np.zeros((2, 2))
  np.savez(broken, **arrays)
  with raises_naming(ValueError, str(broken), 'pre_logits/*',
                     'fine-tuned checkpoint'):
    vit_interop.load_npz(str(broken))


def test_convert_writes_a_workdir_that_predicts(checkpoint, tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from transformer.tools import predict  # pylint: disable=g-import-not-at-top
  _, params, path = checkpoint
  workdir = str(tmp_path / 'converted')
  assert '32x32 images' in workdirs.convert('vit_npz', path, workdir)
  restored = workdir_lib.restore(workdir)
  assert restored.step == 0
  for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
  image = tmp_path / 'x.png'
  Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
  predictions, _ = predict.classify(workdir, [str(image)])
  assert predictions[0][1][0][0].startswith('class_')
  with raises_naming(ValueError, workdir, 'checkpoints', 'new --output'):
    workdirs.convert('vit_npz', path, workdir)


def _leftovers(folder):
  """What a conversion left in `folder` (staging folders included)."""
  return sorted(os.listdir(folder))


def test_convert_refuses_tensors_that_do_not_fit_the_model(
    checkpoint, tmp_path, monkeypatch):
  config, params, path = checkpoint
  wrong = {**params, 'head': {'kernel': np.zeros((config.d_model, 4)),
                              'bias': params['head']['bias']},
           'extra': {'kernel': np.zeros((2, 2))}}
  monkeypatch.setattr(workdirs.vit_interop, 'load_npz',
                      lambda *_: (config, wrong))
  with pytest.raises(ValueError) as error:
    workdirs.convert('vit_npz', path, str(tmp_path / 'converted'))
  message = str(error.value)
  assert 'head/kernel: converted (192, 4), the model has (192, 5)' in message
  assert 'extra/kernel: not in the model (converted (2, 2))' in message
  assert '\n' not in message
  assert _leftovers(tmp_path) == []  # no workdir, no staging folder


def test_convert_refuses_a_workdir_that_restores_otherwise(
    checkpoint, tmp_path, monkeypatch):
  _, _, path = checkpoint
  restore = workdir_lib.restore

  def perturbed(folder, **kwargs):
    restored = restore(folder, **kwargs)
    return dataclasses.replace(restored, params=jax.tree.map(
        lambda x: x * 1.01, restored.params))

  monkeypatch.setattr(workdir_lib, 'restore', perturbed)
  with pytest.raises(workdirs.ConversionFailed,
                     match='computes other logits'):
    workdirs.convert('vit_npz', path, str(tmp_path / 'converted'))
  assert _leftovers(tmp_path) == []


def test_convert_refuses_a_workdir_that_does_not_restore(
    checkpoint, tmp_path, monkeypatch):
  _, _, path = checkpoint
  monkeypatch.setattr(workdirs.checkpoints, 'save', lambda *_: None)
  (tmp_path / 'converted').mkdir()  # an empty --output is fine
  with pytest.raises(workdirs.ConversionFailed,
                     match='does not restore .*No checkpoint'):
    workdirs.convert('vit_npz', path, str(tmp_path / 'converted'))
  assert _leftovers(tmp_path) == ['converted']
  assert _leftovers(tmp_path / 'converted') == []


def test_convert_refuses_an_output_that_is_not_empty(checkpoint, tmp_path):
  _, _, path = checkpoint
  (tmp_path / 'notes.txt').write_text('mine')
  for output in (tmp_path, tmp_path / 'notes.txt'):
    with raises_naming(ValueError, str(output), 'not empty', '--output'):
      workdirs.convert('vit_npz', path, str(output))
  assert _leftovers(tmp_path) == ['notes.txt']


def test_a_one_channel_vit_converts_with_its_channels(tmp_path):
  config = vit.config_for('mu/8', image_size=16, num_classes=3,
                          num_channels=1)
  params = nn.unbox(vit.VisionTransformer(config).init(
      jax.random.key(0), jnp.ones((1, 16, 16, 1)),
      deterministic=True))['params']
  path = tmp_path / 'gray.npz'
  np.savez(path, **original_arrays(params, config.num_layers))
  workdirs.convert('vit_npz', str(path), str(tmp_path / 'converted'))
  restored = workdir_lib.restore(str(tmp_path / 'converted'))
  assert restored.task.model_config.num_channels == 1
  assert restored.params['embedding']['kernel'].shape == (8, 8, 1, 32)


DENSE_0 = 'Transformer/encoderblock_1/MlpBlock_3/Dense_0/'


def _damaged(arrays, case, path):
  """Writes the checkpoint's arrays with one `case` of damage to `path`;
  returns the array the refusal must name."""
  arrays = dict(arrays)
  if case == 'missing':
    del arrays[DENSE_0 + 'bias']
  elif case == 'extra':
    arrays['Transformer/stray/kernel'] = np.zeros((2, 2), np.float32)
  elif case == 'wrong shape':
    arrays[DENSE_0 + 'bias'] = np.zeros(3, np.float32)
  elif case == 'object array':
    arrays[DENSE_0 + 'bias'] = np.asarray([{'run': 'code'}], dtype=object)
  elif case == 'integer array':
    arrays[DENSE_0 + 'bias'] = np.zeros(768, np.int64)
  elif case == 'missing config array':
    del arrays['head/kernel']
  np.savez(path, **arrays)
  if case == 'extra':
    return 'Transformer/stray/kernel'
  return 'head/kernel' if case == 'missing config array' else DENSE_0 + 'bias'


@pytest.mark.parametrize('case', ['missing', 'extra', 'wrong shape',
                                  'object array', 'integer array',
                                  'missing config array'])
def test_a_damaged_npz_is_refused_naming_the_file_and_the_array(
    checkpoint, tmp_path, case):
  _, _, path = checkpoint
  with np.load(path) as data:
    arrays = dict(data)
  broken = tmp_path / 'broken.npz'
  named = _damaged(arrays, case, broken)
  with pytest.raises(ValueError) as error:
    vit_interop.load_npz(str(broken))
  message = str(error.value)
  assert message.startswith(str(broken)) and named in message, message
  assert '\n' not in message


@pytest.mark.parametrize('content', [b'<html>not found</html>', b'PK\x03\x04',
                                     'npy', 'cut short', 'bytes flipped'])
def test_a_file_that_is_not_an_npz_is_refused_naming_it(checkpoint, tmp_path,
                                                        content):
  _, _, path = checkpoint
  broken = tmp_path / 'broken.npz'
  if content == 'npy':
    with open(broken, 'wb') as f:
      np.save(f, np.zeros(3, np.float32))
  elif content == 'cut short':
    with open(path, 'rb') as f:
      broken.write_bytes(f.read()[:5000])
  elif content == 'bytes flipped':  # inside the first array's data
    with open(path, 'rb') as f:
      data = bytearray(f.read())
    data[200:204] = bytes(b ^ 0xff for b in data[200:204])
    broken.write_bytes(bytes(data))
  else:
    broken.write_bytes(content)
  with pytest.raises(ValueError) as error:
    vit_interop.load_npz(str(broken))
  assert str(error.value).startswith(str(broken))
  assert '\n' not in str(error.value)
  with raises_naming(FileNotFoundError, str(tmp_path / 'nowhere.npz'),
                     '.npz checkpoint'):
    vit_interop.load_npz(str(tmp_path / 'nowhere.npz'))
