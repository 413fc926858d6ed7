"""ViT checkpoints in the Hugging Face layout (`google/vit-*`:
ViTForImageClassification's or ViTModel's config.json and safetensors) into
`vit`.

The mapping: the patch convolution [D, C, P, P] -> our conv kernel
[P, P, C, D]; the class token and position embeddings as they are;
attention query/key/value Linear weights [out, in] -> [D, N, H], the output
dense -> [N, H, D]; layernorm_before/after -> the pre-LN norms;
intermediate/output dense -> wi/wo; the final layernorm; the classifier
(ViTModel has none: convert initialises a head of num_labels classes, to be
fine-tuned; its pooler, which classification does not use, is left out).
Hugging Face's 'gelu' is the exact (erf) form: 'gelu_exact' here.
`to_hf` is the inverse (`convert --to=hf`), for ViTs trained here too.

ViTConfig, field by field (transformers' defaults, `DEFAULTS`, stand for
the fields a config.json omits):
- honoured: hidden_size, num_hidden_layers, num_attention_heads,
  intermediate_size, hidden_act (`files.HF_ACTIVATIONS`), layer_norm_eps,
  image_size and patch_size (n or [n, n]), num_channels, num_labels and
  id2label (the classes); hidden_dropout_prob and
  attention_probs_dropout_prob become the dropout rates of fine-tuning.
- refused unless they leave the computation ours (`REFUSED`): qkv_bias,
  pruned_heads, rectangular image_size or patch_size.
- ignored, as they do not change the logits: encoder_stride (the masked
  image modelling decoder), pooler_output_size and pooler_act (the pooler
  of ViTModel, which ViTForImageClassification has not), initializer_range,
  label2id, problem_type (the loss), and every model's architectures,
  transformers_version, dtype, output_*, return_dict and
  chunk_size_feed_forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.interop import files
from transformer.models import vit


# ViTConfig's defaults of the fields that change the computation (and
# PretrainedConfig's number of labels).
DEFAULTS = dict(
    hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3_072, hidden_act='gelu', hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12, image_size=224,
    patch_size=16, num_channels=3, qkv_bias=True, num_labels=2)
# field -> (values that compute what we do, what others make ViT compute).
REFUSED = {
    'qkv_bias': ((True,), 'query, key and value projections without '
                 'biases, where ours have them'),
}


def config_from_hf(hf: dict[str, Any]) -> vit.Config:
  """Our ViT config for a ViTForImageClassification config.json.

  Raises:
    ValueError: another model type, or naming each refused field.
  """
  hf, activation = files.hf_config(
      hf, 'vit', DEFAULTS, REFUSED, 'hidden_act',
      pairs=('image_size', 'patch_size'),
      heads=('hidden_size', 'num_attention_heads'))
  labels = hf.get('id2label') or {}
  return vit.Config(
      num_layers=hf['num_hidden_layers'], d_model=hf['hidden_size'],
      num_heads=hf['num_attention_heads'], d_ff=hf['intermediate_size'],
      activation=activation, layer_norm_epsilon=hf['layer_norm_eps'],
      dropout_rate=hf['hidden_dropout_prob'],
      attention_dropout_rate=hf['attention_probs_dropout_prob'],
      image_size=files.square(hf, 'image_size'),
      patch_size=files.square(hf, 'patch_size'),
      num_channels=hf['num_channels'],
      num_classes=len(labels) or hf['num_labels'],
      pooling='token', positional_encoding='learned',
      patch_embedding='conv')


# ViTModel's pooler (a tanh dense on the class token's state, which the
# image classifier does not use) is left out.
_UNUSED = ('vit.pooler.dense.weight', 'vit.pooler.dense.bias')


def _named_as_classifier(tensors: dict[str, np.ndarray]
                         ) -> dict[str, np.ndarray]:
  """The tensors named as ViTForImageClassification names them: ViTModel's
  carry no 'vit.' prefix."""
  if 'embeddings.cls_token' in tensors:
    tensors = {f'vit.{k}': v for k, v in tensors.items()}
  return {k: v for k, v in tensors.items() if k not in _UNUSED}


def params_from_hf(tensors: dict[str, np.ndarray], config: vit.Config
                   ) -> dict[str, Any]:
  """Our parameter tree from a ViTForImageClassification or ViTModel
  checkpoint (without a head: none is returned, and convert initialises
  one), names and shapes checked (`files.checked`)."""
  original = tensors
  tensors = _named_as_classifier(tensors)
  headless = 'classifier.weight' not in tensors
  d, n, p, c = (config.d_model, config.num_heads, config.patch_size,
                config.num_channels)
  f = config.mlp_dim
  tokens = (config.image_size // p)**2 + 1
  e = 'vit.embeddings.'
  expected = {e + 'cls_token': (1, 1, d),
              e + 'position_embeddings': (1, tokens, d),
              e + 'patch_embeddings.projection.weight': (d, c, p, p),
              e + 'patch_embeddings.projection.bias': (d,),
              'vit.layernorm.weight': (d,), 'vit.layernorm.bias': (d,)}
  if not headless:
    expected.update({'classifier.weight': (config.num_classes, d),
                     'classifier.bias': (config.num_classes,)})
  for i in range(config.num_layers):
    layer = f'vit.encoder.layer.{i}.'
    for name in ('query', 'key', 'value'):
      expected[f'{layer}attention.attention.{name}.weight'] = (d, d)
      expected[f'{layer}attention.attention.{name}.bias'] = (d,)
    expected.update({
        f'{layer}attention.output.dense.weight': (d, d),
        f'{layer}attention.output.dense.bias': (d,),
        f'{layer}intermediate.dense.weight': (f, d),
        f'{layer}intermediate.dense.bias': (f,),
        f'{layer}output.dense.weight': (d, f),
        f'{layer}output.dense.bias': (d,)})
    for norm in ('layernorm_before', 'layernorm_after'):
      expected[f'{layer}{norm}.weight'] = (d,)
      expected[f'{layer}{norm}.bias'] = (d,)
  t = files.checked(tensors, expected,
                    'ViT (ViTModel or ViTForImageClassification)',
                    names=original)
  norm = lambda prefix: files.torch_layer_norm(t, prefix)

  encoder = {'final_norm': norm('vit.layernorm')}
  for i in range(config.num_layers):
    layer = f'vit.encoder.layer.{i}.'
    attention = files.torch_attention(t, {
        'query': f'{layer}attention.attention.query',
        'key': f'{layer}attention.attention.key',
        'value': f'{layer}attention.attention.value',
        'out': f'{layer}attention.output.dense'}, n)
    encoder[f'layer_{i}'] = {
        'attention_sublayer': {'norm': norm(f'{layer}layernorm_before')},
        'mlp_sublayer': {'norm': norm(f'{layer}layernorm_after')},
        'self_attention': attention,
        'mlp': {'wi': {'kernel': t[f'{layer}intermediate.dense.weight'].T,
                       'bias': t[f'{layer}intermediate.dense.bias']},
                'wo': {'kernel': t[f'{layer}output.dense.weight'].T,
                       'bias': t[f'{layer}output.dense.bias']}}}
  params = {
      'cls': t[e + 'cls_token'],
      'pos_embedding': t[e + 'position_embeddings'],
      'embedding': {
          'kernel': t[e + 'patch_embeddings.projection.weight'].transpose(
              2, 3, 1, 0),
          'bias': t[e + 'patch_embeddings.projection.bias']},
      'encoder': encoder}
  if not headless:
    params['head'] = {'kernel': t['classifier.weight'].T,
                      'bias': t['classifier.bias']}
  return params


def load(directory: str) -> tuple[vit.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face ViT directory."""
  return files.load_hf(directory, config_from_hf, params_from_hf,
                       DEFAULTS)


# -- Export: our ViT in Hugging Face's layout ---------------------------------

# Our activations -> Hugging Face's name of the same function.
_HF_ACTIVATIONS = {'gelu': 'gelu_new', 'gelu_exact': 'gelu', 'relu': 'relu',
                   'swish': 'silu'}
# `augment.normalize`, which every image task input goes through, maps
# [0, 1] to [-1, 1]: (x - 0.5) / 0.5 in each channel.
_MEAN = _STD = 0.5


def export_problems(config: vit.Config) -> list[str]:
  """The settings of `config` that Hugging Face's ViT does not compute, one
  phrase each (none: the model exports exactly). Fixed 2-D positions, a
  dense patch embedding and missing biases (`use_bias=False`) are
  expressible: a position table, the convolution it equals, zeros."""
  head_size = config.d_model // config.num_heads
  problems = [
      f'{field}={value!r} ({reason})' for field, value, ok, reason in (
          ('pooling', config.pooling, config.pooling == 'token',
           "the classifier reads the mean of the patch states; Hugging "
           "Face's reads the class token's"),
          ('norm_position', config.norm_position,
           config.norm_position == 'pre', "Hugging Face's ViT normalises "
           'before each sublayer'),
          ('norm', config.norm, config.norm == 'layer',
           "Hugging Face's ViT has LayerNorm"),
          ('activation', config.activation,
           config.activation in _HF_ACTIVATIONS,
           "a gated MLP; Hugging Face's ViT has one dense layer before its "
           'activation'),
          ('num_kv_heads', config.num_kv_heads,
           config.num_kv_heads in (None, config.num_heads),
           'keys and values shared by groups of query heads'),
          ('head_dim', config.head_dim, config.head_dim in (None, head_size),
           f'heads of another width than d_model/num_heads={head_size}'),
          ('value_head_dim', config.value_head_dim,
           config.value_head_dim in (None, config.head_dim or head_size),
           'values of another width than keys'))
      if not ok]
  return problems


def _torch_norm(prefix: str, norm: dict[str, Any]) -> dict[str, np.ndarray]:
  return {f'{prefix}.weight': norm['scale'], f'{prefix}.bias': norm['bias']}


def _layer(prefix: str, ours: dict[str, Any]) -> dict[str, np.ndarray]:
  """One encoder block as ViTLayer's tensors."""
  attention = ours['self_attention']
  tensors = {}
  for name in ('query', 'key', 'value'):
    tensors.update(files.torch_linear(f'{prefix}attention.attention.{name}',
                                 attention[name]))
  tensors.update({
      **files.torch_linear(f'{prefix}attention.output.dense', attention['out'], 2),
      **_torch_norm(f'{prefix}layernorm_before',
                    ours['attention_sublayer']['norm']),
      **_torch_norm(f'{prefix}layernorm_after', ours['mlp_sublayer']['norm']),
      **files.torch_linear(f'{prefix}intermediate.dense', ours['mlp']['wi']),
      **files.torch_linear(f'{prefix}output.dense', ours['mlp']['wo'])})
  return tensors


def _position_embeddings(params: dict[str, Any], config: vit.Config
                         ) -> np.ndarray:
  """[1, tokens, D]: learned positions as they are; fixed 2-D sincos ones,
  which ours adds to the patches before the class token joins them, as a
  table whose class-token row is zero."""
  if config.positional_encoding == 'learned':
    return params['pos_embedding']
  table = vit.sincos_2d(config.grid_size, config.d_model)
  return np.concatenate([np.zeros((1, config.d_model), np.float32),
                         table])[None]


def _patch_projection(prefix: str, embedding: dict[str, Any],
                      config: vit.Config) -> dict[str, np.ndarray]:
  """The patch embedding as a convolution [D, C, P, P]: a dense one
  (`patchify` flattens row, column, channel) is the same kernel."""
  p, c = config.patch_size, config.num_channels
  kernel = np.asarray(embedding['kernel']).reshape(p, p, c, -1)
  return {f'{prefix}.weight': kernel.transpose(3, 2, 0, 1),
          f'{prefix}.bias': embedding['bias']}


def to_hf(params: dict[str, Any], config: vit.Config,
          class_names: list[str] | None = None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a config.json
  dict and tensors named as ViTForImageClassification saves them (with
  `class_names` as its id2label), or as ViTModel for parameters without a
  head (`params_from_hf` of a ViTModel; transformers initialises the
  pooler it leaves out, which classification does not read).

  Raises:
    ValueError: naming each setting Hugging Face's ViT cannot compute
      (`export_problems`), or class names that are not one per class.
  """
  problems = export_problems(config)
  if problems:
    raise ValueError('; '.join(problems) + ": Hugging Face's ViT cannot "
                     'compute this model, so it does not export; export a '
                     'ViT trained without these settings.')
  headless = 'head' not in params
  if class_names is not None and len(class_names) != config.num_classes:
    raise ValueError(f'{len(class_names)} class names for a classifier of '
                     f'{config.num_classes} classes: give one name per '
                     f'class, in the order of its outputs.')
  model = '' if headless else 'vit.'
  e = f'{model}embeddings.'
  encoder = params['encoder']
  tensors = {e + 'cls_token': params['cls'],
             e + 'position_embeddings': _position_embeddings(params, config),
             **_patch_projection(e + 'patch_embeddings.projection',
                                 params['embedding'], config),
             **_torch_norm(f'{model}layernorm', encoder['final_norm'])}
  for i in range(config.num_layers):
    tensors.update(_layer(f'{model}encoder.layer.{i}.', encoder[f'layer_{i}']))
  if not headless:
    tensors.update(files.torch_linear('classifier', params['head']))
  hf = _hf_config(config, headless, class_names)
  return hf, {name: np.ascontiguousarray(np.asarray(value, np.float32))
              for name, value in tensors.items()}


def _hf_config(config: vit.Config, headless: bool,
               class_names: list[str] | None) -> dict[str, Any]:
  hf = {'model_type': 'vit',
        'architectures': ['ViTModel' if headless
                          else 'ViTForImageClassification'],
        'hidden_size': config.d_model, 'num_hidden_layers': config.num_layers,
        'num_attention_heads': config.num_heads,
        'intermediate_size': config.mlp_dim,
        'hidden_act': _HF_ACTIVATIONS[config.activation],
        'layer_norm_eps': config.layer_norm_epsilon,
        'hidden_dropout_prob': config.dropout_rate,
        'attention_probs_dropout_prob': config.attention_dropout_rate,
        'image_size': config.image_size, 'patch_size': config.patch_size,
        'num_channels': config.num_channels, 'qkv_bias': True}
  if headless:
    return hf
  if class_names is None:
    hf['num_labels'] = config.num_classes
  else:
    hf['id2label'] = {str(i): name for i, name in enumerate(class_names)}
    hf['label2id'] = {name: i for i, name in enumerate(class_names)}
  return hf


def image_processor(image_size: int, load_size: int, channels: int
                    ) -> dict[str, Any]:
  """preprocessor_config.json for transformers 5's ViTImageProcessor that
  prepares an image file as `predict` does (`images.square` to
  `load_size`, or `image_size` where that is 0, then `task.inputs`): the
  shorter side resized (bilinear), the centre `image_size` square cut out,
  [0, 255] mapped to [-1, 1] in each channel, colour made RGB.

  What it cannot express, to a pixel: ours rounds the longer side where
  transformers truncates it, and cuts the centre at `load_size` first,
  which can move the crop by a pixel; transformers' torchvision backend
  (the default where torchvision is installed) resizes with its own
  filter. No image processor makes colour images grey: give a grey
  (1-channel) model grey images.
  """
  return {'image_processor_type': 'ViTImageProcessor',
          'do_convert_rgb': channels == 3,
          'do_resize': True, 'size': {'shortest_edge': load_size or image_size},
          'resample': 2,  # PIL's BILINEAR, as `images.square`
          'do_center_crop': True,
          'crop_size': {'height': image_size, 'width': image_size},
          'do_rescale': True, 'rescale_factor': 1 / 255,
          'do_normalize': True, 'image_mean': [_MEAN] * channels,
          'image_std': [_STD] * channels}


# -- The original google-research/vision_transformer .npz checkpoints ------

_BLOCK = 'Transformer/encoderblock_{}/'


# The arrays whose shapes give the config, with their number of axes.
_SIZED = {'embedding/kernel': 4, 'Transformer/posembed_input/pos_embedding': 3,
          'head/kernel': 2,
          _BLOCK.format(0) + 'MultiHeadDotProductAttention_1/query/kernel': 3,
          _BLOCK.format(0) + 'MlpBlock_3/Dense_0/kernel': 2}


def config_from_npz(arrays: dict[str, np.ndarray]) -> vit.Config:
  """The ViT an original checkpoint (e.g. ViT-B_16.npz) holds, from the
  shapes of its arrays (its names are those of the original flax model).

  Raises:
    ValueError: a pre-logits layer, or naming an array the config comes
      from that is missing or has the wrong number of axes.
  """
  if 'pre_logits/kernel' in arrays:
    raise ValueError('This checkpoint has a pre-logits layer (the '
                     'ImageNet-21k pre-training head), which our ViT does not '
                     'have; use a fine-tuned checkpoint or drop pre_logits/*.')
  problems = [f'missing {name}' if name not in arrays else
              f'{name} has shape {arrays[name].shape}, not {axes} axes'
              for name, axes in _SIZED.items()
              if name not in arrays or arrays[name].ndim != axes]
  if problems:
    raise ValueError('Not a ViT checkpoint of the original layout: ' +
                     '; '.join(problems))
  patch, _, channels, d = arrays['embedding/kernel'].shape
  layers = len({name.split('/')[1] for name in arrays
                if name.startswith('Transformer/encoderblock_')})
  _, heads, _ = arrays[_BLOCK.format(0) +
                       'MultiHeadDotProductAttention_1/query/kernel'].shape
  tokens = arrays['Transformer/posembed_input/pos_embedding'].shape[1]
  grid = int(round((tokens - 1)**0.5))
  return vit.Config(
      num_layers=layers, d_model=d, num_heads=heads,
      d_ff=arrays[_BLOCK.format(0) + 'MlpBlock_3/Dense_0/kernel'].shape[1],
      activation='gelu', layer_norm_epsilon=1e-6, dropout_rate=0.0,
      image_size=grid * patch, patch_size=patch, num_channels=channels,
      num_classes=arrays['head/kernel'].shape[1], pooling='token',
      positional_encoding='learned', patch_embedding='conv')


def params_from_npz(arrays: dict[str, np.ndarray], config: vit.Config
                    ) -> dict[str, Any]:
  """Our parameter tree from the original arrays (names and shapes
  checked); the layout of every array is already ours."""
  d, n, f = config.d_model, config.num_heads, config.mlp_dim
  h, p, c = d // n, config.patch_size, config.num_channels
  tokens = (config.image_size // p)**2 + 1
  expected = {'cls': (1, 1, d), 'embedding/kernel': (p, p, c, d),
              'embedding/bias': (d,),
              'Transformer/posembed_input/pos_embedding': (1, tokens, d),
              'Transformer/encoder_norm/scale': (d,),
              'Transformer/encoder_norm/bias': (d,),
              'head/kernel': (d, config.num_classes),
              'head/bias': (config.num_classes,)}
  for i in range(config.num_layers):
    block = _BLOCK.format(i)
    for norm in ('LayerNorm_0', 'LayerNorm_2'):
      expected[f'{block}{norm}/scale'] = (d,)
      expected[f'{block}{norm}/bias'] = (d,)
    attention = block + 'MultiHeadDotProductAttention_1/'
    for name in ('query', 'key', 'value'):
      expected[f'{attention}{name}/kernel'] = (d, n, h)
      expected[f'{attention}{name}/bias'] = (n, h)
    expected.update({f'{attention}out/kernel': (n, h, d),
                     f'{attention}out/bias': (d,),
                     f'{block}MlpBlock_3/Dense_0/kernel': (d, f),
                     f'{block}MlpBlock_3/Dense_0/bias': (f,),
                     f'{block}MlpBlock_3/Dense_1/kernel': (f, d),
                     f'{block}MlpBlock_3/Dense_1/bias': (d,)})
  t = files.checked(arrays, expected, 'ViT')

  def pair(prefix, first='kernel', second='bias', ours=('kernel', 'bias')):
    return {ours[0]: t[f'{prefix}/{first}'], ours[1]: t[f'{prefix}/{second}']}

  def norm(prefix):
    return pair(prefix, 'scale', 'bias', ('scale', 'bias'))

  encoder = {'final_norm': norm('Transformer/encoder_norm')}
  for i in range(config.num_layers):
    block = _BLOCK.format(i)
    attention = block + 'MultiHeadDotProductAttention_1/'
    encoder[f'layer_{i}'] = {
        'attention_sublayer': {'norm': norm(block + 'LayerNorm_0')},
        'mlp_sublayer': {'norm': norm(block + 'LayerNorm_2')},
        'self_attention': {name: pair(attention + name)
                           for name in ('query', 'key', 'value', 'out')},
        'mlp': {'wi': pair(block + 'MlpBlock_3/Dense_0'),
                'wo': pair(block + 'MlpBlock_3/Dense_1')}}
  return {'cls': t['cls'], 'embedding': pair('embedding'),
          'pos_embedding': t['Transformer/posembed_input/pos_embedding'],
          'encoder': encoder, 'head': pair('head')}


def load_npz(path: str, image_size: int | None = None
             ) -> tuple[vit.Config, dict[str, Any]]:
  """(config, parameters) of an original .npz checkpoint; with
  `image_size`, the position embeddings are resampled to its patch grid
  (fine-tuning at another resolution).

  Raises:
    FileNotFoundError: no such file.
    ValueError: naming the file and each missing, unexpected, mis-shaped,
      pickled or non-float array.
  """
  arrays = files.read_npz(path)
  try:
    config = config_from_npz(arrays)
    params = params_from_npz(arrays, config)
  except ValueError as e:
    raise ValueError(f'{path}: {e}') from e
  if image_size and image_size != config.image_size:
    if image_size % config.patch_size:
      raise ValueError(f'image_size={image_size} is not a multiple of the '
                       f'patch size {config.patch_size}.')
    params['pos_embedding'] = np.asarray(vit.resize_position_embedding(
        params['pos_embedding'], image_size // config.patch_size,
        has_class_token=True))
    config = config.replace(image_size=image_size)
  return config, params
