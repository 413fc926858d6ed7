"""Published checkpoints as workdirs of this codebase.

`convert(kind, source, workdir)` writes the experiment config
(config.json), what the task needs besides (the vocabulary in vocab/, or the
class names in dataset.json) and an orbax checkpoint at step 0, so that the
tools work on it as on a trained run: Marian (OPUS-MT) -> translate; GPT-2
and Llama -> generate (and training goes on in the workdir); BERT ->
fine-tuning with `experiments/sst2.py:init_from=`; ViT (`google/vit-*`, or
the original .npz) -> predict, and `--config.train.init_from=WORKDIR`
fine-tunes it. `python -m transformer.tools.convert` is the command.

A workdir is written into a staging folder beside it and checked there
(`write_workdir`: tensor shapes against the model, then a restore and a
forward pass); only a workdir that passes takes its place.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import checkpoints
from transformer import configs
from transformer import errors
from transformer import sharding
from transformer import storage
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import published_ids
from transformer.data import published_tokenizers
from transformer.interop import bert
from transformer.interop import files
from transformer.interop import gpt2
from transformer.interop import llama
from transformer.interop import marian
from transformer.interop import vit as vit_interop
from transformer.interop import vocabulary_rows
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import vit
from transformer.tasks import image_classification
from transformer.tasks import language_modeling
from transformer.tasks import masked_language_modeling
from transformer.tasks import text_classification
from transformer.tasks import translation

KINDS = ('hf', 'vit_npz')


def _experiment(default_config: ml_collections.ConfigDict, model_config: Any,
                **data: Any) -> ml_collections.ConfigDict:
  """A task's default config whose model section is every field of the
  converted model's dataclass, with `data` settings."""
  default_config.data.update(data)
  default_config.model.update(configs.model_values(model_config,
                                                   default_config.model))
  return default_config


def vit_experiment(config) -> ml_collections.ConfigDict:
  """The image-classification config of a converted ViT."""
  experiment = _experiment(image_classification.default_config(), config,
                           image_size=config.image_size, crop='none',
                           flip=False)
  experiment.model.size = f'Ti/{config.patch_size}'
  return experiment


def marian_experiment(config, hf_tokenizer: dict) -> ml_collections.ConfigDict:
  """The translation config of a converted Marian model."""
  return _experiment(
      translation.default_config(), config, tokenizer='marian',
      source='local', max_length=config.max_length,
      source_lang=hf_tokenizer.get('source_lang') or 'src',
      target_lang=hf_tokenizer.get('target_lang') or 'tgt')


def gpt2_experiment(config) -> ml_collections.ConfigDict:
  """The language-modelling config of a converted GPT-2 (our ids)."""
  experiment = _experiment(language_modeling.default_config(), config,
                           tokenizer='gpt2', source='local',
                           max_length=config.max_length)
  experiment.model.size = 'gpt2'
  return experiment


def llama_experiment(config) -> ml_collections.ConfigDict:
  """The language-modelling config of a converted Llama (our ids): every
  model field, the rotary ones included."""
  experiment = _experiment(language_modeling.default_config(), config,
                           tokenizer='llama', source='local',
                           max_length=config.max_length)
  experiment.model.size = 'llama2-7b'
  return experiment


def bert_experiment(config) -> ml_collections.ConfigDict:
  """The masked-LM config of a converted BERT (our ids); text
  classification fine-tunes it with `experiments/glue.py:init_from=`."""
  experiment = _experiment(masked_language_modeling.default_config(), config,
                           tokenizer='bert', source='local',
                           max_length=config.max_length)
  experiment.model.size = 'bert-base'
  return experiment


def bert_classifier_experiment(config, class_names: list[str]
                               ) -> ml_collections.ConfigDict:
  """The text-classification config of a converted
  BertForSequenceClassification (our ids): `predict` classifies with it,
  and fine-tuning goes on from it."""
  experiment = _experiment(text_classification.default_config(), config,
                           tokenizer='bert', max_length=config.max_length,
                           num_classes=config.num_classes,
                           class_names=class_names)
  experiment.model.size = 'bert-base'
  return experiment


class ConversionFailed(checkpoints.WriteFailed):
  """A converted workdir that did not restore to the converted model: a
  checkpoint write that failed (the commands exit 1)."""


def write_workdir(workdir: str, experiment: ml_collections.ConfigDict,
                  params: Any, write_task_files: Callable[[str], None],
                  left_out: Sequence[str] = ()) -> None:
  """config.json, the task's files (`write_task_files(folder)`) and
  checkpoint 0 (with the experiment's optimizer state, freshly initialised,
  so that training can go on in the workdir), written into a staging folder
  beside `workdir` and checked there: every converted tensor against the
  shapes of the model's initialisation before the checkpoint is written,
  then the written workdir restored and its forward pass compared with the
  converted parameters'. Only a workdir that passes becomes `workdir`; a
  failure leaves nothing there. What the checkpoint lacks and is
  initialised is reported, and so are the published weights `left_out`
  (in words, e.g. a next-sentence head).

  Raises:
    ValueError: `workdir` is not new or empty, or the converted tensors do
      not fit the model (each path named with both shapes).
    ConversionFailed: the written workdir does not restore, or computes
      something else than the converted parameters.
  """
  if checkpoints.exist(workdir):
    raise ValueError(f'{workdir} already has checkpoints; convert into a new '
                     f'--output.')
  output = storage.path(workdir)
  if output.exists() and (not output.is_dir() or any(output.iterdir())):
    raise ValueError(f'{workdir} is not empty; convert into a new (or empty) '
                     f'--output.')
  # A bucket's workdir is staged in its local mirror, then uploaded.
  path = os.path.abspath(storage.local_mirror(workdir))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  # A hidden sibling, so that the final rename stays on one filesystem.
  staging = os.path.join(os.path.dirname(path), f'.{os.path.basename(path)}'
                         f'.converting-{os.getpid()}')
  _remove_abandoned_staging(path)
  shutil.rmtree(staging, ignore_errors=True)  # this process's, if any
  os.mkdir(staging)
  try:
    _write_checked(staging, experiment, params, write_task_files, left_out)
    if storage.is_remote(workdir):
      storage.upload(staging, workdir)
      shutil.rmtree(staging)
    else:
      os.replace(staging, path)  # onto nothing, or an empty folder
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise


def _remove_abandoned_staging(path: str) -> None:
  """Removes the staging folders beside `path` of converts that were killed
  (their process is gone), which would otherwise stay, as large as the
  checkpoint, for good."""
  folder, name = os.path.split(path)
  prefix = f'.{name}.converting-'
  for entry in os.listdir(folder):
    pid = entry[len(prefix):] if entry.startswith(prefix) else ''
    if pid.isdigit() and not _alive(int(pid)):
      shutil.rmtree(os.path.join(folder, entry), ignore_errors=True)
      print(f'Removed {os.path.join(folder, entry)}, left by a convert that '
            f'was killed.')


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  return True


def _write_checked(folder: str, experiment: ml_collections.ConfigDict,
                   params: Any, write_task_files: Callable[[str], None],
                   left_out: Sequence[str]) -> None:
  """`write_workdir` into `folder`, with its checks."""
  write_task_files(folder)
  workdir_lib.save_config(experiment, folder)
  trainer = train.Trainer(experiment, folder)
  fresh = check_shapes(params, trainer.abstract.params)
  if fresh:  # e.g. the pooler of a BertForMaskedLM checkpoint
    print(f'Not in the checkpoint, initialised: {", ".join(fresh)}.')
  if left_out:  # e.g. BertForPreTraining's next-sentence head
    print(f'In the checkpoint, not converted: {", ".join(left_out)}.')
  with sharding.active(trainer.mesh, trainer.rules):
    state = trainer.initialise()
    params = {**{k: state.params[k] for k in fresh}, **params}
    converted = jax.tree.map(
        lambda new, old: jax.device_put(jnp.asarray(new, old.dtype),
                                        old.sharding), params, state.params)
    expected = probe(trainer.task, converted)
  mngr = checkpoints.manager(folder)
  checkpoints.save(mngr, 0, converted, state.opt_state)
  mngr.wait_until_finished()
  mngr.close()
  check_round_trip(folder, expected)


def _flat(tree: Any) -> dict[str, Any]:
  """path ('encoder/layer_0/mlp/wi/kernel') -> leaf."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {'/'.join(str(getattr(key, 'key', key)) for key in path): leaf
          for path, leaf in leaves}


def check_shapes(params: dict[str, Any], abstract: dict[str, Any]
                 ) -> list[str]:
  """Checks every converted tensor against the model's initialisation
  (`abstract`, shapes only); returns the model's top-level entries the
  checkpoint lacks entirely, which are initialised instead (a pooler).

  Raises:
    ValueError: naming each tensor whose shape differs (with both shapes),
      that the model lacks, or that is missing from an entry the checkpoint
      has.
  """
  fresh = sorted(set(abstract) - set(params))
  model = _flat({k: v for k, v in abstract.items() if k not in fresh})
  ours = _flat(params)
  shape = lambda x: tuple(np.shape(x))
  problems = [f'{path}: converted {shape(ours[path])}, the model has '
              f'{shape(model[path])}'
              for path in sorted(model.keys() & ours.keys())
              if shape(ours[path]) != shape(model[path])]
  problems += [f'{path}: missing (the model has {shape(model[path])})'
               for path in sorted(model.keys() - ours.keys())]
  problems += [f'{path}: not in the model (converted {shape(ours[path])})'
               for path in sorted(ours.keys() - model.keys())]
  if problems:
    raise ValueError('The converted tensors do not fit the model, nothing '
                     'was written: ' + '; '.join(problems))
  return fresh


def probe(task: Any, params: Any) -> np.ndarray:
  """The model's logits for a few fixed tokens (or one fixed image): what
  the round trip compares."""
  c, model = task.model_config, task.model
  if isinstance(c, vit.Config):
    shape = (1, c.image_size, c.image_size, c.num_channels)
    images = jnp.linspace(-1, 1, int(np.prod(shape))).reshape(shape)
    return np.asarray(model.apply({'params': params}, images,
                                  deterministic=True))
  tokens = jnp.arange(1, 8)[None] % c.vocab_size
  if isinstance(c, encoder_decoder.Config):
    logits = model.apply({'params': params}, tokens, tokens,
                         deterministic=True)
  elif isinstance(c, encoder.Config):
    method = ('classify' if isinstance(
        task, text_classification.TextClassificationTask) else 'mlm_logits')
    logits = model.apply({'params': params}, tokens, deterministic=True,
                         method=method)
  else:
    logits = model.apply({'params': params}, tokens, deterministic=True)
  return np.asarray(logits)


def check_round_trip(folder: str, expected: np.ndarray) -> None:
  """Restores the written workdir as the tools do and compares its
  `probe` with the converted parameters' (`expected`).

  Raises:
    ConversionFailed: the workdir does not restore, or computes otherwise.
  """
  try:
    restored = workdir_lib.restore(folder)
    with restored.active():
      found = probe(restored.task, restored.params)
  except Exception as e:  # pylint: disable=broad-except
    reason = errors.first_line(e, None)
    raise ConversionFailed(f'The converted workdir does not restore '
                           f'({reason}); nothing was written.') from e
  if found.shape != expected.shape or not np.allclose(
      found, expected, rtol=1e-5, atol=1e-5):
    difference = (np.abs(found - expected).max()
                  if found.shape == expected.shape else 'shape')
    raise ConversionFailed(
        f'The converted workdir, restored, computes other logits than the '
        f'converted parameters (largest difference {difference}); nothing '
        f'was written.')


def convert(kind: str, source: str, workdir: str, *,
            image_size: int | None = None) -> str:
  """Converts the published checkpoint `source` (kind 'hf': a Hugging Face
  model directory, or a repository of the Hugging Face cache,
  `models--ORG--NAME`, whose current snapshot is read; 'vit_npz': an
  original ViT .npz, its positions resampled to `image_size`) into
  `workdir`; returns what was written, in words."""
  if kind == 'vit_npz':
    config, params = vit_interop.load_npz(source, image_size)
    return _write_vit(workdir, config, params, {})
  if kind != 'hf':
    raise ValueError(f'kind={kind!r}; choose one of {KINDS}.')
  if not os.path.isdir(source):
    raise FileNotFoundError(f'--input={source} is not a folder: give the '
                            f'model directory (config.json, the weights and '
                            f'the tokenizer files).')
  source = files.snapshot(source)
  hf = files.read_config(source)
  if not isinstance(hf.get('model_type'), str):
    raise ValueError(f"{source}/config.json has model_type="
                     f"{hf.get('model_type')!r}, not a model name: the file "
                     f"is damaged or is not a Hugging Face model's config.")
  writers = {'vit': _convert_vit, 'marian': _convert_marian,
             'gpt2': _convert_gpt2, 'bert': _convert_bert,
             'llama': _convert_llama}
  if hf.get('model_type') not in writers:
    raise ValueError(
        f"model_type={hf.get('model_type')!r}: choose a directory of one of "
        f"{sorted(writers)}.")
  return writers[hf['model_type']](source, workdir, hf)


def _convert_vit(source: str, workdir: str, hf: dict) -> str:
  config, params = vit_interop.load(source)
  return _write_vit(workdir, config, params, hf.get('id2label') or {})


def _write_vit(workdir: str, config, params, labels: dict) -> str:
  if config.num_channels not in image_classification.CHANNELS:
    raise ValueError(
        f'num_channels={config.num_channels}: the image task feeds '
        f'{" or ".join(map(str, image_classification.CHANNELS))} channels '
        f'(grey or RGB), so nothing can use this ViT here; nothing was '
        f'written. Choose a checkpoint of 1 or 3 channels.')
  class_names = [labels.get(str(i), f'class_{i}')
                 for i in range(config.num_classes)]

  def dataset_file(staging):
    with open(os.path.join(staging, image_classification.DATASET_FILE),
              'w') as f:
      json.dump({'classes': class_names, 'channels': config.num_channels}, f)

  write_workdir(workdir, vit_experiment(config), params, dataset_file)
  return (f'{config.num_layers} layers, width {config.d_model}, '
          f'{config.image_size}x{config.image_size} images, '
          f'{config.num_classes} classes')


def _published_files(source: str, *names: str) -> list[str]:
  """Paths of the vocabulary files in `source`, refused if any is missing."""
  paths = [os.path.join(source, name) for name in names]
  missing = [name for name, path in zip(names, paths)
             if not os.path.exists(path)]
  if missing:
    raise FileNotFoundError(
        f'{source} lacks {", ".join(missing)}: download the tokenizer files '
        f'with the weights (the whole model repository).')
  return paths


def _tokenizer_config(source: str) -> dict:
  path = os.path.join(source, 'tokenizer_config.json')
  return files.read_json(path) if os.path.exists(path) else {}


def _convert_marian(source: str, workdir: str, hf: dict) -> str:
  del hf  # marian.load reads it again, with the vocabulary
  source_spm, target_spm = _published_files(source, marian.SOURCE_SPM,
                                            marian.TARGET_SPM)
  config, params, pieces = marian.load(source)
  write_workdir(
      workdir, marian_experiment(config, _tokenizer_config(source)), params,
      lambda staging: published_tokenizers.MarianTokenizer.save(
          os.path.join(staging, 'vocab'), source_spm, target_spm, pieces))
  return (f'Marian, {config.num_layers}+{config.num_layers} layers, width '
          f'{config.d_model}, {config.vocab_size:,} shared pieces')


def _check_tokenizer_size(tokens: int, vocab_size: int, *,
                          padded: bool = False) -> None:
  """Every id the tokenizer gives needs its row of the embedding (a
  tokenizer larger than the table would read other tokens' rows: gathers
  clamp), and, unless the family pads its table (`padded`: GPT-2 to a
  multiple of 64, say), every row its token.

  Raises:
    ValueError: naming both sizes and the fix.
  """
  if tokens > vocab_size or (tokens < vocab_size and not padded):
    raise ValueError(
        f'The tokenizer has {tokens:,} tokens, config.json vocab_size='
        f'{vocab_size:,}: every id needs its row of the embedding'
        f'{"" if padded else " and every row its token"}; download the '
        f'tokenizer files of this checkpoint, or correct vocab_size.')


def _convert_gpt2(source: str, workdir: str, hf: dict) -> str:
  config, params = gpt2.load(source)
  tokenizer = published_tokenizers.published_bpe(source, 'gpt2')
  _check_tokenizer_size(len(published_tokenizers.token_list(tokenizer)),
                        config.vocab_size, padded=True)
  eos_id = hf.get('eos_token_id', config.vocab_size - 1)
  gpt2_vocab_size = config.vocab_size
  config, params = vocabulary_rows.decoder_in_our_ids(
      config, params,
      published_ids.IdOrder.of(gpt2_vocab_size, eos=eos_id))
  write_workdir(
      workdir, gpt2_experiment(config), params,
      lambda staging: published_tokenizers.GPT2Tokenizer.save(
          os.path.join(staging, 'vocab'), tokenizer, eos_id,
          gpt2_vocab_size))
  return (f'GPT-2, {config.num_layers} layers, width {config.d_model}, '
          f'context {config.max_length}, {gpt2_vocab_size:,} tokens (+ '
          f'padding at id 0)')


def _convert_llama(source: str, workdir: str, hf: dict) -> str:
  config, params = llama.load(source)
  published = published_tokenizers.published_llama(source)
  _check_tokenizer_size(published.vocab_size, config.vocab_size)
  bos_id, eos_id = published_tokenizers.llama_special_ids(hf, source, published)
  ids = published_tokenizers.LlamaTokenizer.id_order(published, eos_id)
  llama_vocab_size = config.vocab_size
  config, params = vocabulary_rows.decoder_in_our_ids(config, params, ids)
  write_workdir(
      workdir, llama_experiment(config), params,
      lambda staging: published_tokenizers.LlamaTokenizer.save(
          os.path.join(staging, 'vocab'), published, ids, bos_id, eos_id))
  return (f'Llama, {config.num_layers} layers, width {config.d_model}, '
          f'context {config.max_length}, {llama_vocab_size:,} tokens (+ '
          f'padding at id 0)')


def _convert_bert(source: str, workdir: str, hf: dict) -> str:
  """A masked-LM workdir, or a text-classification one where the
  checkpoint has a classifier (BertForSequenceClassification)."""
  config = files.config_of(source, bert.config_from_hf)
  tokenizer = published_tokenizers.published_bpe(source, 'bert')
  tensors = files.read_safetensors(source)
  layout = bert.layout(tensors)
  left_out = bert.left_out(tensors)
  params = files.fitted(hf, bert.DEFAULTS,
                        lambda: bert.params_from_hf(tensors, config))
  tensors = None  # frees the published arrays (the lambda held them)
  ids = published_tokenizers.BertTokenizer.id_order(
      published_tokenizers.token_list(tokenizer))
  _check_tokenizer_size(len(ids), config.vocab_size)
  params = vocabulary_rows.in_our_ids(params, ids)
  if 'classifier' in params:
    if hf.get('problem_type') == 'multi_label_classification':
      raise ValueError('problem_type=multi_label_classification: our text '
                       'classification gives each text one class; choose a '
                       'single-label classifier.')
    labels = hf.get('id2label') or {}
    class_names = [str(labels.get(str(i), i))
                   for i in range(config.num_classes)]
    experiment = bert_classifier_experiment(config, class_names)
    if 'mlm_bias' in params:
      left_out.append('cls.predictions (the masked-LM head, which a '
                      'classifier does not use)')
    params = {k: v for k, v in params.items() if not k.startswith('mlm_')}
    kind = f'a classifier of {config.num_classes} classes'
  else:
    experiment, kind = bert_experiment(config), 'masked-LM'
  write_workdir(
      workdir, experiment, params,
      lambda staging: published_tokenizers.BertTokenizer.save(
          os.path.join(staging, 'vocab'), tokenizer, ids), left_out)
  return (f'BERT ({layout}, {kind}), '
          f'{config.num_layers} layers, width {config.d_model}, '
          f'{config.vocab_size:,} WordPiece tokens')
