"""ViT checkpoints in the Hugging Face layout (`google/vit-*`:
ViTForImageClassification's config.json and safetensors) into `vit`.

The mapping: the patch convolution [D, C, P, P] -> our conv kernel
[P, P, C, D]; the class token and position embeddings as they are;
attention query/key/value Linear weights [out, in] -> [D, N, H], the output
dense -> [N, H, D]; layernorm_before/after -> the pre-LN norms;
intermediate/output dense -> wi/wo; the final layernorm; the classifier.
Hugging Face's 'gelu' is the exact (erf) form: 'gelu_exact' here.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from transformer.interop import files
from transformer.models import vit

_ACTIVATIONS = {'gelu': 'gelu_exact', 'gelu_new': 'gelu',
                'gelu_pytorch_tanh': 'gelu', 'relu': 'relu'}


def config_from_hf(hf: dict[str, Any]) -> vit.Config:
  """Our ViT config for a ViTForImageClassification config.json."""
  if hf.get('model_type') != 'vit':
    raise ValueError(f"config.json has model_type={hf.get('model_type')!r}; "
                     f"this converter reads 'vit'.")
  if hf.get('hidden_act') not in _ACTIVATIONS:
    raise ValueError(f"hidden_act={hf.get('hidden_act')!r} is not supported; "
                     f"choose one of {tuple(_ACTIVATIONS)}.")
  if not hf.get('qkv_bias', True):
    raise ValueError('qkv_bias=False is not supported.')
  labels = hf.get('id2label') or {}
  return vit.Config(
      num_layers=hf['num_hidden_layers'], d_model=hf['hidden_size'],
      num_heads=hf['num_attention_heads'], d_ff=hf['intermediate_size'],
      activation=_ACTIVATIONS[hf['hidden_act']],
      layer_norm_epsilon=hf.get('layer_norm_eps', 1e-12),
      dropout_rate=hf.get('hidden_dropout_prob', 0.0),
      image_size=hf['image_size'], patch_size=hf['patch_size'],
      num_channels=hf.get('num_channels', 3),
      num_classes=len(labels) or hf.get('num_labels', 2),
      pooling='token', positional_encoding='learned',
      patch_embedding='conv')


def params_from_hf(tensors: dict[str, np.ndarray], config: vit.Config
                   ) -> dict[str, Any]:
  """Our parameter tree from the checkpoint's tensors, names and shapes
  checked (`files.checked`)."""
  d, n, p, c = (config.d_model, config.num_heads, config.patch_size,
                config.num_channels)
  h, f = d // n, config.mlp_dim
  tokens = (config.image_size // p)**2 + 1
  e = 'vit.embeddings.'
  expected = {e + 'cls_token': (1, 1, d),
              e + 'position_embeddings': (1, tokens, d),
              e + 'patch_embeddings.projection.weight': (d, c, p, p),
              e + 'patch_embeddings.projection.bias': (d,),
              'vit.layernorm.weight': (d,), 'vit.layernorm.bias': (d,),
              'classifier.weight': (config.num_classes, d),
              'classifier.bias': (config.num_classes,)}
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
  t = files.checked(tensors, expected, 'ViT')

  def norm(prefix):
    return {'scale': t[f'{prefix}.weight'], 'bias': t[f'{prefix}.bias']}

  encoder = {'final_norm': norm('vit.layernorm')}
  for i in range(config.num_layers):
    layer = f'vit.encoder.layer.{i}.'
    attention = {
        name: {'kernel': t[f'{layer}attention.attention.{name}.weight'].T
                         .reshape(d, n, h),
               'bias': t[f'{layer}attention.attention.{name}.bias']
                       .reshape(n, h)}
        for name in ('query', 'key', 'value')}
    attention['out'] = {
        'kernel': t[f'{layer}attention.output.dense.weight'].T.reshape(n, h,
                                                                       d),
        'bias': t[f'{layer}attention.output.dense.bias']}
    encoder[f'layer_{i}'] = {
        'attention_sublayer': {'norm': norm(f'{layer}layernorm_before')},
        'mlp_sublayer': {'norm': norm(f'{layer}layernorm_after')},
        'self_attention': attention,
        'mlp': {'wi': {'kernel': t[f'{layer}intermediate.dense.weight'].T,
                       'bias': t[f'{layer}intermediate.dense.bias']},
                'wo': {'kernel': t[f'{layer}output.dense.weight'].T,
                       'bias': t[f'{layer}output.dense.bias']}}}
  return {
      'cls': t[e + 'cls_token'],
      'pos_embedding': t[e + 'position_embeddings'],
      'embedding': {
          'kernel': t[e + 'patch_embeddings.projection.weight'].transpose(
              2, 3, 1, 0),
          'bias': t[e + 'patch_embeddings.projection.bias']},
      'encoder': encoder,
      'head': {'kernel': t['classifier.weight'].T,
               'bias': t['classifier.bias']}}


def load(directory: str) -> tuple[vit.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face ViT directory."""
  with open(os.path.join(directory, 'config.json')) as f:
    config = config_from_hf(json.load(f))
  return config, params_from_hf(files.read_safetensors(directory), config)
