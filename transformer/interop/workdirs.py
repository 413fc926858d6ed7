"""Published checkpoints as workdirs of this codebase.

`convert(kind, source, workdir)` writes the experiment config
(config.json), what the task needs besides (the vocabulary in vocab/, or the
class names in dataset.json) and an orbax checkpoint at step 0, so that the
tools work on it as on a trained run: Marian (OPUS-MT) -> translate; GPT-2
-> generate; BERT -> fine-tuning with `experiments/sst2.py:init_from=`; ViT
(`google/vit-*`, or the original .npz) -> predict, and
`--config.train.init_from=WORKDIR` fine-tunes it. `python -m
transformer.tools.convert` is the command.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections

from transformer import checkpoints
from transformer import configs
from transformer import sharding
from transformer import train
from transformer import workdir as workdir_lib
from transformer.interop import bert
from transformer.interop import files
from transformer.interop import gpt2
from transformer.interop import marian
from transformer.interop import vit as vit_interop
from transformer.interop import vocabularies
from transformer.tasks import image_classification
from transformer.tasks import language_modeling
from transformer.tasks import masked_language_modeling
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


def bert_experiment(config) -> ml_collections.ConfigDict:
  """The masked-LM config of a converted BERT (our ids); text
  classification fine-tunes it with `experiments/sst2.py:init_from=`."""
  experiment = _experiment(masked_language_modeling.default_config(), config,
                           tokenizer='bert', source='local',
                           max_length=config.max_length)
  experiment.model.size = 'bert-base'
  return experiment


def write_workdir(workdir: str, experiment: ml_collections.ConfigDict,
                  params: Any, write_task_files: Callable[[str], None]
                  ) -> None:
  """config.json, the task's files (`write_task_files(workdir)`) and
  checkpoint 0 (with the experiment's optimizer state, freshly initialised,
  so that training can go on in the workdir)."""
  if checkpoints.exist(workdir):
    raise ValueError(f'{workdir} already has checkpoints; convert into a new '
                     f'--output.')
  os.makedirs(workdir, exist_ok=True)
  write_task_files(workdir)
  workdir_lib.save_config(experiment, workdir)
  trainer = train.Trainer(experiment, workdir)
  with sharding.active(trainer.mesh, trainer.rules):
    state = trainer.initialise()
    fresh = sorted(set(state.params) - set(params))
    if fresh:  # e.g. the pooler of a BertForMaskedLM checkpoint
      print(f'Not in the checkpoint, initialised: {", ".join(fresh)}.')
    params = {**{k: state.params[k] for k in fresh}, **params}
    converted = jax.tree.map(
        lambda new, old: jax.device_put(jnp.asarray(new, old.dtype),
                                        old.sharding), params, state.params)
  mngr = checkpoints.manager(workdir)
  checkpoints.save(mngr, 0, converted, state.opt_state)
  mngr.wait_until_finished()
  mngr.close()


def convert(kind: str, source: str, workdir: str, *,
            image_size: int | None = None) -> str:
  """Converts the published checkpoint `source` (kind 'hf': a Hugging Face
  model directory; 'vit_npz': an original ViT .npz, its positions resampled
  to `image_size`) into `workdir`; returns what was written, in words."""
  if kind == 'vit_npz':
    config, params = vit_interop.load_npz(source, image_size)
    return _write_vit(workdir, config, params, {})
  if kind != 'hf':
    raise ValueError(f'kind={kind!r}; choose one of {KINDS}.')
  hf = files.read_config(source)
  writers = {'vit': _convert_vit, 'marian': _convert_marian,
             'gpt2': _convert_gpt2, 'bert': _convert_bert}
  if hf.get('model_type') not in writers:
    raise ValueError(
        f"model_type={hf.get('model_type')!r}: choose a directory of one of "
        f"{sorted(writers)}.")
  return writers[hf['model_type']](source, workdir, hf)


def _convert_vit(source: str, workdir: str, hf: dict) -> str:
  config, params = vit_interop.load(source)
  return _write_vit(workdir, config, params, hf.get('id2label') or {})


def _write_vit(workdir: str, config, params, labels: dict) -> str:
  class_names = [labels.get(str(i), f'class_{i}')
                 for i in range(config.num_classes)]

  def dataset_file(workdir):
    with open(os.path.join(workdir, image_classification.DATASET_FILE),
              'w') as f:
      json.dump({'classes': class_names, 'channels': 3}, f)

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
      lambda workdir: vocabularies.MarianTokenizer.save(
          os.path.join(workdir, 'vocab'), source_spm, target_spm, pieces))
  return (f'Marian, {config.num_layers}+{config.num_layers} layers, width '
          f'{config.d_model}, {config.vocab_size:,} shared pieces')


def _convert_gpt2(source: str, workdir: str, hf: dict) -> str:
  vocab_json, merges_txt = _published_files(source, 'vocab.json',
                                            'merges.txt')
  config, params = gpt2.load(source)
  eos_id = hf.get('eos_token_id', config.vocab_size - 1)
  if eos_id != config.vocab_size - 1:
    raise ValueError(f'eos_token_id={eos_id} is not the last id: GPT-2 '
                     'checkpoints keep <|endoftext|> last, which export '
                     'relies on.')
  gpt2_vocab_size = config.vocab_size
  config, params = gpt2.with_our_ids(config, params, eos_id)
  write_workdir(
      workdir, gpt2_experiment(config), params,
      lambda workdir: vocabularies.GPT2Tokenizer.save(
          os.path.join(workdir, 'vocab'), vocab_json, merges_txt, eos_id,
          gpt2_vocab_size))
  return (f'GPT-2, {config.num_layers} layers, width {config.d_model}, '
          f'context {config.max_length}, {gpt2_vocab_size:,} tokens (+ '
          f'padding at id 0)')


def _convert_bert(source: str, workdir: str, hf: dict) -> str:
  del hf  # bert.load reads it
  vocab_txt, = _published_files(source, 'vocab.txt')
  config, params = bert.load(source)
  order = vocabularies.BertTokenizer.bert_order(vocab_txt)
  if len(order) != config.vocab_size:
    raise ValueError(f'vocab.txt has {len(order)} tokens, config.json '
                     f'vocab_size={config.vocab_size}.')
  lower_case = _tokenizer_config(source).get('do_lower_case', True)
  write_workdir(
      workdir, bert_experiment(config), bert.with_our_ids(params, order),
      lambda workdir: vocabularies.BertTokenizer.save(
          os.path.join(workdir, 'vocab'), vocab_txt, lower_case))
  return (f'BERT, {config.num_layers} layers, width {config.d_model}, '
          f'{config.vocab_size:,} WordPiece tokens')
