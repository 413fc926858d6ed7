"""ViT export (`convert --to=hf`, `interop.vit.to_hf`): a converted
`google/vit-*`-shaped checkpoint exports back to its published tensors and
class names; a ViT built here (fixed 2-D positions, a dense patch
embedding, no biases, grey images) exports to a ViTForImageClassification
that transformers loads with nothing missing and whose logits are ours,
with an image processor that prepares an image file as `predict` does;
what Hugging Face's ViT cannot compute is refused by name, before anything
is written. Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from conftest import convert_and_restore
from conftest import randomised
from conftest import raises_naming
from transformer import workdir as workdir_lib
from transformer.data import images as image_data
from transformer.interop import export
from transformer.interop import files
from transformer.interop import vit as vit_interop
from transformer.interop import workdirs
from transformer.models import vit
from transformer.tasks import image_classification

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
pil = pytest.importorskip('PIL.Image')

VIT = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
           num_attention_heads=4, intermediate_size=48)
CLASSES = ['cat', 'dog', 'fox']
# Largest logit difference from ours allowed (the measured ones are near
# 1e-6).
TOLERANCE = 1e-4


def _images(config, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-1, 1, (
      2, config.image_size, config.image_size, config.num_channels)).astype(
          np.float32)


def _loaded(directory, architecture=None, **kwargs):
  """The exported model as transformers loads it: nothing missing,
  unexpected or mis-shaped (`architecture`: AutoModelForImageClassification
  unless given)."""
  architecture = architecture or transformers.AutoModelForImageClassification
  model, info = architecture.from_pretrained(directory,
                                             output_loading_info=True,
                                             **kwargs)
  assert not any(info.values()), info
  return model.eval()


def _largest_difference(model, config, params, images) -> float:
  """Max |HF logits - ours| on `images` [B, H, W, C]."""
  with torch.no_grad():
    theirs = model(torch.tensor(images.transpose(0, 3, 1, 2))).logits.numpy()
  ours = vit.VisionTransformer(config).apply({'params': params}, images,
                                             deterministic=True)
  return float(np.abs(np.asarray(ours) - theirs).max())


def _randomised(params, seed: int = 0):
  """Every parameter drawn from N(0, 0.2^2), so that a mapping mistake
  cannot hide behind ones and zeros."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: rng.normal(0, 0.2, np.shape(x)).astype(
      np.float32), nn.unbox(params))


@pytest.fixture(scope='module', name='published')
def published_fixture(tmp_path_factory):
  """A ViTForImageClassification with named classes, saved as published."""
  directory = tmp_path_factory.mktemp('vit')
  torch.manual_seed(0)
  config = transformers.ViTConfig(
      **VIT, id2label=dict(enumerate(CLASSES)),
      label2id={name: i for i, name in enumerate(CLASSES)})
  randomised(transformers.ViTForImageClassification(config)).save_pretrained(
      directory)
  return str(directory)


def test_a_converted_vit_exports_back_to_its_tensors(published, tmp_path):
  restored, params, workdir = convert_and_restore(
      published, str(tmp_path / 'workdir'))
  written = export.export(workdir, str(tmp_path / 'out'))
  assert written.startswith('ViT (ViTForImageClassification)')
  original = files.read_safetensors(published)
  exported = files.read_safetensors(str(tmp_path / 'out'))
  assert sorted(exported) == sorted(original)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  model = _loaded(tmp_path / 'out')
  assert model.config.id2label == dict(enumerate(CLASSES))
  config = restored.task.model_config
  assert _largest_difference(model, config, params,
                             _images(config)) < TOLERANCE


def test_a_headless_vit_model_exports_as_vit_model(tmp_path):
  """ViTModel's tensors come back but for the pooler, which convert leaves
  out (classification does not read it)."""
  torch.manual_seed(0)
  randomised(transformers.ViTModel(transformers.ViTConfig(**VIT))
             ).save_pretrained(tmp_path / 'published')
  config, params = vit_interop.load(str(tmp_path / 'published'))
  hf, tensors = vit_interop.to_hf(params, config)
  assert hf['architectures'] == ['ViTModel']
  original = files.read_safetensors(str(tmp_path / 'published'))
  assert sorted(tensors) == sorted(
      k for k in original if not k.startswith('pooler.'))
  for name, value in tensors.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  files.save_hf(str(tmp_path / 'out'), hf, tensors)
  _loaded(tmp_path / 'out', transformers.ViTModel, add_pooling_layer=False)


@pytest.mark.parametrize('settings', [
    dict(positional_encoding='sincos2d', patch_embedding='dense',
         use_bias=False, activation='gelu_exact'),
    dict(num_channels=1, activation='swish', layer_norm_epsilon=1e-5),
])
def test_a_vit_built_here_computes_our_logits_in_transformers(tmp_path,
                                                              settings):
  """Fixed 2-D positions become a table (the class token's row zero),
  dense patches the convolution they equal, missing biases zeros."""
  config = vit.config_for('mu/4', image_size=8, num_classes=3, **settings)
  params = _randomised(vit.VisionTransformer(config).init(
      jax.random.PRNGKey(0), _images(config), deterministic=True)['params'])
  hf, tensors = vit_interop.to_hf(params, config, CLASSES)
  files.save_hf(str(tmp_path), hf, tensors)
  model = _loaded(tmp_path)
  assert _largest_difference(model, config, params,
                             _images(config)) < TOLERANCE


@pytest.mark.parametrize('change,named', [
    (dict(pooling='gap'), "pooling='gap'"),
    (dict(norm_position='post'), "norm_position='post'"),
    (dict(norm='rms'), "norm='rms'"),
    (dict(activation='swiglu'), "activation='swiglu'"),
    (dict(num_kv_heads=1), 'num_kv_heads=1'),
    (dict(head_dim=8), 'head_dim=8'),
])
def test_what_hugging_faces_vit_cannot_compute_is_refused(change, named):
  config = vit.config_for('mu/4', image_size=8, num_classes=3, **change)
  with raises_naming(ValueError, named, "Hugging Face's ViT cannot compute"):
    vit_interop.to_hf({}, config)


# -- Through the command's function, with a workdir written here -----------

GREY = dict(image_size=8, load_size=12)


def _vit_workdir(path, **model) -> str:
  """A grey image-classification workdir of a 'mu/4' ViT (`model`
  settings), randomised parameters at step 0, as training leaves one."""
  experiment = image_classification.default_config()
  experiment.model.update(model)
  experiment.data.update(GREY)
  config = vit.config_for('mu/4', image_size=GREY['image_size'],
                          num_channels=1, num_classes=len(CLASSES), **model)
  params = _randomised(vit.VisionTransformer(config).init(
      jax.random.PRNGKey(0), _images(config), deterministic=True)['params'])

  def dataset_file(folder):
    with open(f'{folder}/{image_classification.DATASET_FILE}', 'w') as f:
      json.dump({'classes': CLASSES, 'channels': 1}, f)

  workdirs.write_workdir(str(path), experiment, params, dataset_file)
  return str(path)


def _picture(path, height: int, width: int) -> str:
  """A smooth grey PNG (resampling differences stay small on it)."""
  rows, cols = np.mgrid[0:height, 0:width]
  pixels = 127 + 120 * np.sin(rows / 3.0) * np.cos(cols / 4.0)
  pil.fromarray(pixels.astype(np.uint8), 'L').save(path)
  return str(path)


def _prepared(out, task, path):
  """(transformers' pixel values, ours) for the image file `path`."""
  processor = transformers.AutoImageProcessor.from_pretrained(out)
  with pil.open(path) as image:
    theirs = processor(image, return_tensors='np')['pixel_values']
  picture = image_data.read_image(path, GREY['load_size'], 1)
  ours = task.inputs(picture[None]).transpose(0, 3, 1, 2)
  return theirs, ours


def test_a_grey_vit_built_here_exports_with_its_image_processor(tmp_path):
  """Its layers scanned (one stacked block), which export unstacks."""
  workdir = _vit_workdir(tmp_path / 'workdir',
                         positional_encoding='sincos2d', scan_layers=True)
  written = export.export(workdir, str(tmp_path / 'out'))
  assert 'preprocessor_config.json' in written
  restored = workdir_lib.restore(workdir)
  model = _loaded(tmp_path / 'out')
  assert model.config.id2label == dict(enumerate(CLASSES))
  config = restored.task.model_config
  assert _largest_difference(model, config, restored.params,
                             _images(config)) < TOLERANCE
  # 24x36 resizes to 12x18 exactly: the same pixels as `predict` reads.
  theirs, ours = _prepared(tmp_path / 'out', restored.task,
                           _picture(tmp_path / 'a.png', 24, 36))
  assert theirs.shape == ours.shape == (1, 1, 8, 8)
  np.testing.assert_allclose(theirs, ours, atol=1e-6)
  # 24x39: ours rounds the longer side (19.5) to 20, transformers truncates
  # it to 19, so the picture moves by part of a pixel (documented in
  # `vit.image_processor`): not equal, but within what a pixel's step
  # changes.
  theirs, ours = _prepared(tmp_path / 'out', restored.task,
                           _picture(tmp_path / 'b.png', 24, 39))
  pixel_step = max(np.abs(np.diff(ours, axis=axis)).max() for axis in (2, 3))
  assert 0 < np.abs(theirs - ours).max() <= pixel_step


def test_a_refused_vit_leaves_no_output(tmp_path):
  workdir = _vit_workdir(tmp_path / 'workdir', pooling='gap')
  with raises_naming(ValueError, "pooling='gap'", 'class token'):
    export.export(workdir, str(tmp_path / 'out'))
  assert sorted(p.name for p in tmp_path.iterdir()) == ['workdir']
