"""Turns a published checkpoint into a workdir of this codebase.

    python -m transformer.convert --from=hf --input=DIR --output=WORKDIR
    python -m transformer.convert --from=vit_npz --input=ViT-B_16.npz \
        --output=WORKDIR [--image_size=384]

Writes the experiment config (config.json), what the task needs besides
(the vocabulary in vocab/, or the class names in dataset.json) and an orbax
checkpoint at step 0, so that the commands work on it as on a trained run:
Marian (OPUS-MT) -> `python -m transformer.translate --workdir=WORKDIR`;
GPT-2 -> `python -m transformer.generate --workdir=WORKDIR`;
BERT -> fine-tuning with `experiments/sst2.py:init_from=WORKDIR`;
ViT (`google/vit-*`, or the original .npz) -> `python -m transformer.predict
--workdir=WORKDIR`, and `--config.train.init_from=WORKDIR` fine-tunes it (at
another resolution or on other classes, as
`image_classification.adapt_pretrained` allows).
"""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from transformer import checkpoints
from transformer import commands
from transformer import sharding
from transformer import train
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

_FROM = flags.DEFINE_enum('from', None, ['hf', 'vit_npz'],
                          'Checkpoint format.')
_INPUT = flags.DEFINE_string('input', None, 'Hugging Face directory or .npz.')
_OUTPUT = flags.DEFINE_string('output', None, 'The workdir to write.')
_IMAGE_SIZE = flags.DEFINE_integer(
    'image_size', None, 'vit_npz: resample the positions to this size.')


def vit_experiment(config):
  """The image-classification config of a converted ViT."""
  experiment = image_classification.default_config()
  experiment.data.update(dict(image_size=config.image_size, crop='none',
                              flip=False))
  experiment.model.update(dict(
      size=f'Ti/{config.patch_size}', num_layers=config.num_layers,
      d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
      dropout_rate=config.dropout_rate, pooling=config.pooling,
      positional_encoding=config.positional_encoding,
      patch_embedding=config.patch_embedding, activation=config.activation,
      layer_norm_epsilon=config.layer_norm_epsilon))
  return experiment


def marian_experiment(config, hf_tokenizer: dict):
  """The translation config of a converted Marian model."""
  experiment = translation.default_config()
  experiment.data.update(dict(
      tokenizer='marian', source='local', max_length=config.max_length,
      source_lang=hf_tokenizer.get('source_lang') or 'src',
      target_lang=hf_tokenizer.get('target_lang') or 'tgt'))
  experiment.model.update(dict(
      family='transformer', num_layers=config.num_layers,
      d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
      dropout_rate=config.dropout_rate,
      attention_dropout_rate=config.attention_dropout_rate,
      activation=config.activation, norm_position=config.norm_position,
      positional_encoding=config.positional_encoding,
      sinusoidal_layout=config.sinusoidal_layout,
      scale_embeddings=config.scale_embeddings,
      final_logits_bias=config.final_logits_bias,
      layer_norm_epsilon=config.layer_norm_epsilon, tie_embeddings=True))
  return experiment


def gpt2_experiment(config):
  """The language-modelling config of a converted GPT-2 (our ids)."""
  experiment = language_modeling.default_config()
  experiment.data.update(dict(tokenizer='gpt2', source='local',
                              max_length=config.max_length))
  experiment.model.update(dict(
      size='gpt2', num_layers=config.num_layers, d_model=config.d_model,
      num_heads=config.num_heads, d_ff=config.d_ff,
      dropout_rate=config.dropout_rate, activation=config.activation,
      norm_position=config.norm_position,
      positional_encoding=config.positional_encoding,
      layer_norm_epsilon=config.layer_norm_epsilon,
      mask_padding=config.mask_padding))
  return experiment


def bert_experiment(config):
  """The masked-LM config of a converted BERT (our ids); text
  classification fine-tunes it with `--config.train.init_from`."""
  experiment = masked_language_modeling.default_config()
  experiment.data.update(dict(tokenizer='bert', source='local',
                              max_length=config.max_length))
  experiment.model.update(dict(
      size='bert-base', num_layers=config.num_layers,
      d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
      dropout_rate=config.dropout_rate, activation=config.activation,
      layer_norm_epsilon=config.layer_norm_epsilon,
      type_vocab_size=config.type_vocab_size))
  return experiment


def write_workdir(workdir: str, experiment, params, write_task_files) -> None:
  """config.json, the task's files (`write_task_files(workdir)`) and
  checkpoint 0 (the optimizer state of the experiment's optimizer, freshly
  initialised)."""
  if checkpoints.exist(workdir):
    raise ValueError(f'{workdir} already has checkpoints; convert into a new '
                     f'--output.')
  os.makedirs(workdir, exist_ok=True)
  write_task_files(workdir)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(experiment.to_json_best_effort(indent=2))
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


@commands.user_errors_exit
def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for flag in (_FROM, _INPUT, _OUTPUT):
    if flag.value is None:
      raise app.UsageError(f'Give --{flag.name}.')
  if _FROM.value == 'vit_npz':
    config, params = vit_interop.load_npz(_INPUT.value, _IMAGE_SIZE.value)
    _write_vit(config, params, {})
    return
  hf = files.read_config(_INPUT.value)
  writers = {'vit': _convert_vit, 'marian': _convert_marian,
             'gpt2': _convert_gpt2, 'bert': _convert_bert}
  if hf.get('model_type') not in writers:
    raise app.UsageError(
        f"model_type={hf.get('model_type')!r}: choose a directory of one of "
        f"{sorted(writers)}.")
  writers[hf['model_type']](hf)


def _convert_vit(hf: dict) -> None:
  config, params = vit_interop.load(_INPUT.value)
  _write_vit(config, params, hf.get('id2label') or {})


def _write_vit(config, params, labels: dict) -> None:
  class_names = [labels.get(str(i), f'class_{i}')
                 for i in range(config.num_classes)]

  def dataset_file(workdir):
    with open(os.path.join(workdir, image_classification.DATASET_FILE),
              'w') as f:
      json.dump({'classes': class_names, 'channels': 3}, f)

  write_workdir(_OUTPUT.value, vit_experiment(config), params, dataset_file)
  print(f'Wrote {_OUTPUT.value}: {config.num_layers} layers, width '
        f'{config.d_model}, {config.image_size}x{config.image_size} images, '
        f'{config.num_classes} classes.')


def _convert_marian(hf: dict) -> None:
  del hf  # marian.load reads it again, with the vocabulary
  source_spm, target_spm = _published_files(marian.SOURCE_SPM,
                                            marian.TARGET_SPM)
  config, params, pieces = marian.load(_INPUT.value)
  path = lambda name: os.path.join(_INPUT.value, name)
  tokenizer_config = {}
  if os.path.exists(path('tokenizer_config.json')):
    with open(path('tokenizer_config.json')) as f:
      tokenizer_config = json.load(f)
  write_workdir(
      _OUTPUT.value, marian_experiment(config, tokenizer_config), params,
      lambda workdir: vocabularies.MarianTokenizer.save(
          os.path.join(workdir, 'vocab'), source_spm, target_spm, pieces))
  print(f'Wrote {_OUTPUT.value}: Marian, {config.num_layers}+'
        f'{config.num_layers} layers, width {config.d_model}, '
        f'{config.vocab_size:,} shared pieces.')



def _published_files(*names: str) -> list[str]:
  """Paths of the vocabulary files in --input, refused if any is missing."""
  paths = [os.path.join(_INPUT.value, name) for name in names]
  missing = [name for name, path in zip(names, paths)
             if not os.path.exists(path)]
  if missing:
    raise FileNotFoundError(
        f'{_INPUT.value} lacks {", ".join(missing)}: download the '
        'tokenizer files with the weights (the whole model repository).')
  return paths


def _convert_gpt2(hf: dict) -> None:
  vocab_json, merges_txt = _published_files('vocab.json', 'merges.txt')
  config, params = gpt2.load(_INPUT.value)
  eos_id = hf.get('eos_token_id', config.vocab_size - 1)
  if eos_id != config.vocab_size - 1:
    raise ValueError(f'eos_token_id={eos_id} is not the last id: GPT-2 '
                     'checkpoints keep <|endoftext|> last, which export '
                     'relies on.')
  gpt2_vocab_size = config.vocab_size
  config, params = gpt2.with_our_ids(config, params, eos_id)
  write_workdir(
      _OUTPUT.value, gpt2_experiment(config), params,
      lambda workdir: vocabularies.GPT2Tokenizer.save(
          os.path.join(workdir, 'vocab'), vocab_json, merges_txt, eos_id,
          gpt2_vocab_size))
  print(f'Wrote {_OUTPUT.value}: GPT-2, {config.num_layers} layers, width '
        f'{config.d_model}, context {config.max_length}, '
        f'{gpt2_vocab_size:,} tokens (+ padding at id 0).')



def _convert_bert(hf: dict) -> None:
  del hf  # bert.load reads it
  vocab_txt, = _published_files('vocab.txt')
  config, params = bert.load(_INPUT.value)
  order = vocabularies.BertTokenizer.bert_order(vocab_txt)
  if len(order) != config.vocab_size:
    raise ValueError(f'vocab.txt has {len(order)} tokens, config.json '
                     f'vocab_size={config.vocab_size}.')
  tokenizer_config = {}
  path = os.path.join(_INPUT.value, 'tokenizer_config.json')
  if os.path.exists(path):
    with open(path) as f:
      tokenizer_config = json.load(f)
  write_workdir(
      _OUTPUT.value, bert_experiment(config),
      bert.with_our_ids(params, order),
      lambda workdir: vocabularies.BertTokenizer.save(
          os.path.join(workdir, 'vocab'), vocab_txt,
          tokenizer_config.get('do_lower_case', True)))
  print(f'Wrote {_OUTPUT.value}: BERT, {config.num_layers} layers, width '
        f'{config.d_model}, {config.vocab_size:,} WordPiece tokens.')


if __name__ == '__main__':
  app.run(main)
