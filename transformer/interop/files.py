"""Reading published checkpoints: safetensors only (pickled .bin files can
run code when loaded), every tensor name and shape checked."""

from __future__ import annotations

import json
import os

import numpy as np


# Hugging Face activation names -> ours ('gelu' is the tanh approximation
# here, the erf form there).
HF_ACTIVATIONS = {'gelu': 'gelu_exact', 'gelu_new': 'gelu',
                  'gelu_pytorch_tanh': 'gelu', 'relu': 'relu',
                  'swish': 'swish', 'silu': 'swish'}


def hf_config(hf: dict, model_type: str, activation_key: str,
              default_activation: str) -> str:
  """Checks a config.json's model type; returns our name of its activation.

  Raises:
    ValueError: another model type, or an activation we do not have.
  """
  if hf.get('model_type') != model_type:
    raise ValueError(f"config.json has model_type={hf.get('model_type')!r}; "
                     f"this converter reads {model_type!r}.")
  activation = hf.get(activation_key, default_activation)
  if activation not in HF_ACTIVATIONS:
    raise ValueError(f'{activation_key}={activation!r} is not supported; '
                     f'choose one of {tuple(HF_ACTIVATIONS)}.')
  return HF_ACTIVATIONS[activation]


def read_config(directory: str) -> dict:
  """A Hugging Face directory's config.json."""
  with open(os.path.join(directory, 'config.json')) as f:
    return json.load(f)


def load_hf(directory: str, config_from_hf, params_from_hf):
  """(config, parameters) of a Hugging Face directory, with a family's
  `config_from_hf(config.json)` and `params_from_hf(tensors, config)`."""
  config = config_from_hf(read_config(directory))
  return config, params_from_hf(read_safetensors(directory), config)


def read_safetensors(directory: str) -> dict[str, np.ndarray]:
  """Every tensor of model.safetensors, or of the shards its index lists."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  single = os.path.join(directory, 'model.safetensors')
  index = os.path.join(directory, 'model.safetensors.index.json')
  if os.path.exists(single):
    return load_file(single)
  if os.path.exists(index):
    with open(index) as f:
      shards = sorted(set(json.load(f)['weight_map'].values()))
    tensors = {}
    for shard in shards:
      tensors.update(load_file(os.path.join(directory, shard)))
    return tensors
  raise FileNotFoundError(
      f'No model.safetensors or model.safetensors.index.json in {directory} '
      f'(only safetensors are read: pickled .bin checkpoints can run code).')


def save_hf(directory: str, hf: dict, tensors: dict[str, np.ndarray]
            ) -> None:
  """Writes a Hugging Face directory: config.json and model.safetensors."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(hf, f, indent=2)
  save_file(tensors, os.path.join(directory, 'model.safetensors'),
            metadata={'format': 'pt'})


def checked(found: dict[str, np.ndarray],
            expected: dict[str, tuple[int, ...]], model: str
            ) -> dict[str, np.ndarray]:
  """`found` as float32 arrays, if its names and shapes are `expected`.

  Raises:
    ValueError: listing every missing, unexpected and mis-shaped tensor.
  """
  problems = [f'missing {k} {s}' for k, s in expected.items()
              if k not in found]
  problems += [f'unexpected {k} {tuple(v.shape)}' for k, v in found.items()
               if k not in expected]
  problems += [f'{k}: expected {expected[k]}, found {tuple(v.shape)}'
               for k, v in found.items()
               if k in expected and tuple(v.shape) != expected[k]]
  if problems:
    raise ValueError(f'The checkpoint does not match the {model} config: ' +
                     '; '.join(problems))
  return {k: np.asarray(v, np.float32) for k, v in found.items()}


def torch_layer_norm(tensors: dict[str, np.ndarray], prefix: str
                     ) -> dict[str, np.ndarray]:
  """A PyTorch LayerNorm's weight and bias as flax's scale and bias."""
  return {'scale': tensors[f'{prefix}.weight'],
          'bias': tensors[f'{prefix}.bias']}


def torch_attention(tensors: dict[str, np.ndarray], names: dict[str, str],
                    num_heads: int) -> dict[str, dict[str, np.ndarray]]:
  """PyTorch Linear layers (weights [out, in]) of multi-head attention as
  our query/key/value [D, N, H] and out [N, H, D] kernels.

  Args:
    tensors: name -> array.
    names: our 'query', 'key', 'value', 'out' -> the checkpoint's prefix of
      that Linear layer (its '.weight' and '.bias').
    num_heads: N.
  """
  d = tensors[names['query'] + '.weight'].shape[1]
  h = d // num_heads
  result = {}
  for name in ('query', 'key', 'value'):
    result[name] = {
        'kernel': tensors[names[name] + '.weight'].T.reshape(d, num_heads, h),
        'bias': tensors[names[name] + '.bias'].reshape(num_heads, h)}
  result['out'] = {
      'kernel': tensors[names['out'] + '.weight'].T.reshape(num_heads, h, d),
      'bias': tensors[names['out'] + '.bias']}
  return result
