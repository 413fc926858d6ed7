"""Reading published checkpoints: safetensors and .npz only, never
unpickled (pickled .bin files can run code when loaded), every tensor name
and shape checked, and a config.json's fields checked against what our
models compute (`hf_config`)."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import Any, Callable

import numpy as np

from transformer import errors
from transformer.data import reading


# Hugging Face activation names -> ours ('gelu' is the tanh approximation
# here, the erf form there). The others (quick_gelu, gelu_10, relu6, mish,
# tanh, ...) compute something none of ours does and are refused.
HF_ACTIVATIONS = {'gelu': 'gelu_exact', 'gelu_python': 'gelu_exact',
                  'gelu_new': 'gelu', 'gelu_pytorch_tanh': 'gelu',
                  'gelu_python_tanh': 'gelu', 'gelu_fast': 'gelu',
                  'gelu_accurate': 'gelu', 'relu': 'relu', 'swish': 'swish',
                  'silu': 'swish'}
# Fields every Hugging Face config may hold that change the computation in
# ways none of our models follows: field -> (the values that leave it as
# ours, what any other value makes the reference compute). Configs written
# before transformers 5 carry `pruned_heads` (attention heads removed from
# some layers).
COMMON_REFUSED = {
    'pruned_heads': (({}, None), 'heads pruned from some layers leave them '
                     'narrower than the others'),
}


def hf_config(hf: dict, model_type: str, defaults: dict,
              refused: dict[str, tuple[tuple, str]], activation_key: str,
              pairs: tuple[str, ...] = (),
              heads: tuple[str, str] | None = None) -> tuple[dict, str]:
  """A family's config.json checked: its model type, every refused field
  (`refused` and `COMMON_REFUSED`) and its activation.

  Args:
    hf: config.json.
    model_type: the family's.
    defaults: the reference's default of every field that changes the
      computation (a field a config.json omits means the reference's
      default, not ours).
    refused: field -> (values we compute as the reference does, what any
      other value makes the reference compute).
    activation_key: the field naming the activation.
    pairs: fields that may also hold a pair of values (`check_types`).
    heads: (width field, heads field): the width must split into heads.

  Returns:
    (config.json with the defaults, our name of its activation).

  Raises:
    ValueError: another model type, naming every refused field with its
      value and reason, or an activation we do not have.
  """
  if hf.get('model_type') != model_type:
    raise ValueError(f"config.json has model_type={hf.get('model_type')!r}; "
                     f"this converter reads {model_type!r}.")
  check_types(hf, defaults, pairs)
  hf = {**defaults, **hf}
  problems = [
      f'{field}={hf[field]!r} is not supported ({reason}; ours computes '
      f'{field}={supported[0]!r})'
      for field, (supported, reason) in {**COMMON_REFUSED, **refused}.items()
      if field in hf and hf[field] not in supported]
  if heads and hf[heads[1]] > 0 and hf[heads[0]] % hf[heads[1]]:
    problems.append(f'{heads[0]}={hf[heads[0]]} is not divisible by '
                    f'{heads[1]}={hf[heads[1]]} (no model splits its width '
                    f'so: the file is damaged or of another architecture)')
  activation = hf[activation_key]
  if activation not in HF_ACTIVATIONS:
    problems.append(f'{activation_key}={activation!r} is not supported '
                    f'(choose one of {", ".join(HF_ACTIVATIONS)})')
  if problems:
    raise ValueError('; '.join(problems) + ': no exact conversion exists, '
                     'choose another checkpoint.')
  return hf, HF_ACTIVATIONS[activation]


def _type_of(default: Any) -> tuple[tuple[type, ...], str]:
  """The JSON types a field whose default is `default` may take."""
  if isinstance(default, bool):
    return (bool,), 'true or false'
  if isinstance(default, int):
    return (int,), 'an integer'
  if isinstance(default, float):
    return (int, float), 'a number'
  return (str,), 'a string'


def check_types(hf: dict, defaults: dict, pairs: tuple[str, ...] = ()
                ) -> None:
  """Every field of config.json that the family reads has the type of
  transformers' default (an integer for a size, a string for an
  activation, ...), or for the fields in `pairs` also a pair of integers
  (ViT's [height, width]); fields whose default is None are checked where
  read.

  Raises:
    ValueError: naming each field, its value and the type it needs.
  """
  problems = []
  for field, default in defaults.items():
    if field not in hf or default is None:
      continue
    types, words = _type_of(default)
    value = hf[field]
    # A pair of values (square() then refuses unequal ones).
    values = value if field in pairs and isinstance(value, list) else [value]
    if not all(isinstance(v, types) and (bool in types or not isinstance(
        v, bool)) for v in values):
      problems.append(f'{field}={value!r} is not {words}')
  if problems:
    raise ValueError('; '.join(problems) + ': the file is damaged or was '
                     'edited by hand; download it again.')


def square(hf: dict, field: str) -> int:
  """An image or patch size, n or [n, n]; rectangular ones refused.

  Raises:
    ValueError: naming the field, for [h, w] with h != w.
  """
  value = hf[field]
  if isinstance(value, (list, tuple)):
    if len(value) != 2 or value[0] != value[1]:
      raise ValueError(f'{field}={value!r} is not supported (rectangular; '
                       f'ours are square): choose another checkpoint.')
    value = value[0]
  return value


def read_json(path: str) -> dict:
  """A JSON object from a file (`reading.json_object`), or an error
  naming the file."""
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: download the whole model '
                            f'repository (weights, config and tokenizer '
                            f'files).')
  return reading.json_object(path)


def read_config(directory: str) -> dict:
  """A Hugging Face directory's config.json."""
  return read_json(os.path.join(directory, 'config.json'))


def config_of(directory: str, config_from_hf: Callable[[dict], Any]) -> Any:
  """A family's `config_from_hf` of a directory's config.json; a refused
  field is reported with the file's path."""
  path = os.path.join(directory, 'config.json')
  hf = read_json(path)
  try:
    return config_from_hf(hf)
  except ValueError as e:
    raise ValueError(f'{path}: {e}') from e


def load_hf(directory: str, config_from_hf, params_from_hf,
            defaults: dict | None = None):
  """(config, parameters) of a Hugging Face directory, with a family's
  `config_from_hf(config.json)` and `params_from_hf(tensors, config)`;
  `defaults`, the family's, name the size fields config.json omitted when
  the tensors do not fit (`fitted`)."""
  config = config_of(directory, config_from_hf)
  tensors = read_safetensors(directory)
  return config, fitted(read_config(directory), defaults or {},
                        lambda: params_from_hf(tensors, config))


def fitted(hf: dict, defaults: dict, load: Callable[[], Any]) -> Any:
  """`load()`; where the tensors do not fit the config and config.json
  omits size fields (transformers' defaults stood in for them), the error
  names those fields: a config.json of another model is a likelier cause
  than a damaged checkpoint.

  Raises:
    ValueError: `load`'s, with the omitted fields named.
  """
  try:
    return load()
  except ValueError as e:
    omitted = [f'{field}={value}' for field, value in defaults.items()
               if field not in hf and isinstance(value, int)
               and not isinstance(value, bool)]
    if 'does not match' not in str(e) or not omitted:
      raise
    raise ValueError(
        f'{e} config.json omits {len(omitted)} size fields, which took '
        f"transformers' defaults ({', '.join(omitted[:6])}"
        f"{', ...' if len(omitted) > 6 else ''}): is it the config.json "
        f'of this checkpoint?') from e


def _allowed_roots(directory: str) -> list[str]:
  """Where a checkpoint's files may lie once symlinks are resolved: the
  directory itself and, for a snapshot of the Hugging Face cache
  (`models--ORG--NAME/snapshots/HASH/`, whose files link into
  `models--ORG--NAME/blobs/`), that repository's blobs."""
  root = os.path.realpath(directory)
  snapshots = os.path.dirname(os.path.abspath(directory))
  if os.path.basename(snapshots) == 'snapshots':
    repository = os.path.dirname(snapshots)
    return [root, os.path.realpath(os.path.join(repository, 'blobs'))]
  return [root]


def _shard_paths(directory: str, index: str) -> list[str]:
  """The shard files an index's weight_map names, each inside
  `directory` (a name that leaves it, e.g. '../x', is refused) or, for a
  Hugging Face cache snapshot, a link into its repository's blobs."""
  weight_map = read_json(index).get('weight_map')
  if not isinstance(weight_map, dict) or not weight_map:
    raise ValueError(f'{index} has no weight_map of tensor names to shard '
                     f'files.')
  roots = _allowed_roots(directory)
  paths = []
  for shard in sorted(set(map(str, weight_map.values()))):
    named = os.path.normpath(os.path.join(directory, shard))
    path = os.path.realpath(named)
    if os.path.dirname(named) != os.path.normpath(directory) or (
        os.path.dirname(path) not in roots):
      raise ValueError(f'{index} names the shard {shard!r}, which is not a '
                       f'file of {directory}: refused.')
    paths.append(path)
  return paths


def snapshot(directory: str) -> str:
  """A model directory, or, given a Hugging Face cache repository
  (`~/.cache/huggingface/hub/models--ORG--NAME`), the snapshot its
  refs/main names (the one `from_pretrained` loads)."""
  ref = os.path.join(directory, 'refs', 'main')
  if os.path.isdir(os.path.join(directory, 'snapshots')) and os.path.isfile(
      ref):
    name = reading.text(ref).strip()
    path = os.path.join(directory, 'snapshots', name)
    if not name or os.path.basename(name) != name or not os.path.isdir(path):
      raise FileNotFoundError(f'{ref} names the snapshot {name!r}, which '
                              f'{directory}/snapshots lacks: download the '
                              f'model again.')
    return path
  return directory


def read_safetensors(directory: str) -> dict[str, np.ndarray]:
  """Every tensor of model.safetensors, or of the shards its index lists."""
  single = os.path.join(directory, 'model.safetensors')
  index = os.path.join(directory, 'model.safetensors.index.json')
  for path in (single, index):
    if os.path.islink(path) and not os.path.exists(path):
      raise FileNotFoundError(
          f'{path} links to {os.readlink(path)}, which is missing (a '
          f'download of the Hugging Face cache cut short): download the '
          f'model again.')
  if os.path.exists(single):
    return reading.safetensors(single)
  if os.path.exists(index):
    tensors = {}
    for shard in _shard_paths(directory, index):
      tensors.update(reading.safetensors(shard))
    return tensors
  fix = ''
  if os.path.exists(os.path.join(directory, 'pytorch_model.bin')):
    # torch's weights_only loader refuses code; clone() unties shared
    # tensors, which safetensors will not write twice.
    fix = (f'; it has pytorch_model.bin: rewrite it as safetensors with '
           f'torch: python -c "import torch, safetensors.torch as s; '
           f"d = torch.load('{directory}/pytorch_model.bin', "
           f"weights_only=True); s.save_file({{k: v.clone() for k, v in "
           f"d.items()}}, '{directory}/model.safetensors')\"")
  raise FileNotFoundError(
      f'No model.safetensors or model.safetensors.index.json in {directory} '
      f'(only safetensors are read: pickled .bin checkpoints can run code)'
      f'{fix}.')


def read_npz(path: str) -> dict[str, np.ndarray]:
  """The arrays of an .npz checkpoint, never unpickled; a damaged file, an
  array of Python objects (pickled) or of anything but floating point is
  refused in one line naming the file and the array.

  Raises:
    FileNotFoundError: no such file.
    ValueError: naming the file (and the array) and the problem.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} not found: give the path of the .npz '
                            f'checkpoint.')
  with open(path, 'rb') as f:
    magic = f.read(6)
  if magic.startswith(b'\x93NUMPY'):
    raise ValueError(f'{path} holds a single array (.npy), not the named '
                     f'arrays of an .npz checkpoint.')
  if not magic.startswith((b'PK\x03\x04', b'PK\x05\x06')):
    raise ValueError(f'{path} is not an .npz file (no zip header): the file '
                     f'is damaged or another kind; download it again.')
  try:
    data = np.load(path, allow_pickle=False)  # never unpickle
  except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
    raise ValueError(f'{path} is not a valid .npz file '
                     f'({errors.first_line(e, None)}): the file is damaged '
                     f'or cut short; download it again.') from e
  with data:
    return {name: _float_array(data, name, path) for name in data.files}


def _float_array(data: Any, name: str, path: str) -> np.ndarray:
  """One floating-point array of an open .npz, or an error naming it."""
  try:
    array = data[name]
  except ValueError as e:  # object arrays need pickle
    raise ValueError(f'{path}: array {name!r} holds Python objects, which '
                     f'are never unpickled; re-save the checkpoint with '
                     f'numeric arrays.') from e
  except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise ValueError(f'{path}: array {name!r} cannot be read '
                     f'({errors.first_line(e, None)}): the file is '
                     f'damaged or cut short; download it again.') from e
  if array.dtype.kind != 'f':
    raise ValueError(f'{path}: array {name!r} has dtype {array.dtype}, not '
                     f'floating point: it is not a parameter.')
  return array




def save_hf(directory: str, hf: dict, tensors: dict[str, np.ndarray]
            ) -> None:
  """Writes a Hugging Face directory: config.json and model.safetensors."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(hf, f, indent=2)
  save_file(tensors, os.path.join(directory, 'model.safetensors'),
            metadata={'format': 'pt'})


# Tensor names that tell the published architecture of a checkpoint: the
# first entry all of whose names are present names it (`looks_like`).
_SIGNATURES = (
    ('BertForPreTraining', ('bert.embeddings.word_embeddings.weight',
                            'cls.seq_relationship.weight')),
    ('BertForSequenceClassification', ('bert.embeddings.word_embeddings'
                                       '.weight', 'classifier.weight')),
    ('BertForMaskedLM', ('bert.embeddings.word_embeddings.weight',
                         'cls.predictions.bias')),
    ('BertModel', ('embeddings.word_embeddings.weight',
                   'encoder.layer.0.attention.self.query.weight')),
    ('RobertaModel (or a RoBERTa head)', ('roberta.embeddings'
                                          '.word_embeddings.weight',)),
    ('DistilBertModel (or a DistilBERT head)', (
        'distilbert.embeddings.word_embeddings.weight',)),
    ('GPT2LMHeadModel', ('transformer.wte.weight',)),
    ('GPT2Model', ('wte.weight', 'h.0.attn.c_attn.weight')),
    ('ViTForImageClassification', ('vit.embeddings.cls_token',
                                   'classifier.weight')),
    ('ViTModel', ('embeddings.cls_token',)),
    ('LlamaForCausalLM (or Mistral, Qwen2)', (
        'model.embed_tokens.weight', 'model.layers.0.self_attn.q_proj'
        '.weight')),
    ('LlamaModel (or Mistral, Qwen2)', ('embed_tokens.weight',
                                        'layers.0.self_attn.q_proj.weight')),
    ('MarianMTModel', ('model.encoder.embed_positions.weight',)),
    ('MarianMTModel', ('model.shared.weight',)),
)


def looks_like(names) -> str:
  """The published architecture a set of tensor names belongs to, in
  words ('an unknown architecture' when none fits)."""
  names = set(names)
  for architecture, signature in _SIGNATURES:
    if names.issuperset(signature):
      return architecture
  return 'an unknown architecture'


def _first(items: list[str], shown: int = 3) -> str:
  more = f' and {len(items) - shown} more' if len(items) > shown else ''
  return ', '.join(items[:shown]) + more


def checked(found: dict[str, np.ndarray],
            expected: dict[str, tuple[int, ...]], model: str,
            names=None) -> dict[str, np.ndarray]:
  """`found` as float32 arrays, if its names and shapes are `expected`.
  `names`: the checkpoint's own tensor names, where the loader renamed
  them into `found` (they tell its architecture).

  Raises:
    ValueError: in one line, which architecture the tensor names look like
      beside the one expected (`model`), and how many tensors are missing,
      unexpected and mis-shaped, with the first few of each.
  """
  missing = [f'missing {k} {s}' for k, s in expected.items()
             if k not in found]
  unexpected = [f'unexpected {k} {tuple(v.shape)}' for k, v in found.items()
                if k not in expected]
  misshaped = [f'{k}: expected {expected[k]}, found {tuple(v.shape)}'
               for k, v in found.items()
               if k in expected and tuple(v.shape) != expected[k]]
  kinds = {'missing': missing, 'unexpected': unexpected,
           'mis-shaped': misshaped}
  if missing or unexpected or misshaped:
    counts = ', '.join(f'{len(items)} {kind}' for kind, items in kinds.items())
    raise ValueError(
        f'The checkpoint does not match the {model} config (its tensor names '
        f'look like {looks_like(found if names is None else names)}): '
        f'{counts}: ' + '; '.join(_first(items) for items in kinds.values()
                                  if items) + '.')
  return {k: np.asarray(v, np.float32) for k, v in found.items()}


def torch_layer_norm(tensors: dict[str, np.ndarray], prefix: str
                     ) -> dict[str, np.ndarray]:
  """A PyTorch LayerNorm's weight and bias as flax's scale and bias."""
  return {'scale': tensors[f'{prefix}.weight'],
          'bias': tensors[f'{prefix}.bias']}


def torch_linear(prefix: str, dense: dict[str, Any], in_axes: int = 1
                 ) -> dict[str, np.ndarray]:
  """A flax Dense (our attention projections: heads folded in) as a
  PyTorch Linear, weight [out, in]; a missing bias (`use_bias=False`) as
  zeros, which compute the same."""
  kernel = np.asarray(dense['kernel'])
  weight = kernel.reshape(int(np.prod(kernel.shape[:in_axes])), -1).T
  bias = dense.get('bias')
  bias = (np.zeros(weight.shape[0]) if bias is None
          else np.asarray(bias).reshape(-1))
  return {f'{prefix}.weight': weight, f'{prefix}.bias': bias}


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
