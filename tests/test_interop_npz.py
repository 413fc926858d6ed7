"""The original vision_transformer .npz checkpoints (no torch needed): a file
written with the original names and shapes loads into our ViT."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.interop import vit as vit_interop
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
  with pytest.raises(ValueError, match=r'encoderblock_1/MlpBlock_3/Dense_0/'
                     r'bias: expected \(768,\), found \(3,\)'):
    vit_interop.load_npz(str(broken))
  arrays['pre_logits/kernel'] = np.zeros((2, 2))
  np.savez(broken, **arrays)
  with pytest.raises(ValueError, match='pre-logits'):
    vit_interop.load_npz(str(broken))


def test_convert_writes_a_workdir_that_predicts(checkpoint, tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
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
  with pytest.raises(ValueError, match='already has checkpoints'):
    workdirs.convert('vit_npz', path, workdir)
