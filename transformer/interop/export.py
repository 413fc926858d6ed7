"""A workdir back into the Hugging Face layout (`convert --to=hf`):
config.json, model.safetensors and the tokenizer (or image processor)
files, which transformers' `AutoModel*`, `AutoTokenizer` and
`AutoImageProcessor.from_pretrained` load.

Language models export as GPT-2 (learned positions, LayerNorm, GELU) or
Llama (rotary positions, RMSNorm, a gated MLP), masked-LM and
classification encoders as BERT, image classifiers as ViT
(ViTForImageClassification, with a preprocessor_config.json that prepares
images as `predict` does, `vit.image_processor`) and translation
Transformers as Marian (MarianMTModel, with MarianTokenizer's files), each
through its family's `to_hf`, which refuses by name a model it cannot
represent before anything is written. A converted workdir's vocabulary goes
back to the published ids (`published_ids.IdOrder`; Marian's to OPUS-MT's
numbering, `marian.published_order`), and its published tokenizer files
are written as they came; the special ids in config.json are the published
ones. Low-rank adapters are merged into the kernels first, and scanned
layers unstacked. A translation vocabulary built here (SentencePiece)
becomes Marian's, the one model on both sides, with our ids (padding 0,
EOS 1, unknown 2); a language model's or encoder's vocabulary built here
(SentencePiece, characters, bytes, words) has no Hugging Face tokenizer
class: its files are copied beside the model, and the ids are ours
(padding 0, EOS 1).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, NamedTuple

import jax
import ml_collections
import numpy as np

from transformer import layers
from transformer import storage
from transformer import workdir as workdir_lib
from transformer.data import published_tokenizers
from transformer.data import tokenization
from transformer.interop import bert
from transformer.interop import files
from transformer.interop import gpt2
from transformer.interop import llama
from transformer.interop import marian
from transformer.interop import vit

# Tasks whose models export, and the families they export as.
EXPORTED_TASKS = {'language_modeling': 'GPT-2 or Llama',
                  'masked_language_modeling': 'BERT',
                  'text_classification': 'BERT',
                  'image_classification': 'ViT',
                  'translation': 'Marian'}


class _Export(NamedTuple):
  """What a workdir exports as: the family in words, config.json, the
  tensors, and the writer of the other files (given the output folder,
  it returns what it wrote, in words)."""
  name: str
  hf: dict[str, Any]
  tensors: dict[str, np.ndarray]
  write_files: Callable[[str], str]


def export(workdir: str, output: str) -> str:
  """Writes `workdir`'s latest checkpoint into the Hugging Face directory
  `output` (new or empty); returns what was written, for the command.

  Raises:
    ValueError: a task or model with no Hugging Face counterpart, named.
  """
  config = workdir_lib.load_config(workdir)
  _check_exported(workdir, config)
  if os.path.exists(output) and (not os.path.isdir(output)
                                 or os.listdir(output)):
    raise ValueError(f'{output} is not empty: export into a new (or empty) '
                     f'--output.')
  # Low-rank adapters come back folded into the kernels.
  restored = workdir_lib.restore(workdir)
  params = layers.unstack_layers(
      jax.tree.map(np.asarray, jax.device_get(restored.params)))
  exported = _EXPORTERS[config.task](restored.task, params, config, workdir)
  # Written beside `output`, renamed into place once whole: a failure
  # leaves no half-written directory there.
  output = os.path.abspath(output)
  staging = os.path.join(os.path.dirname(output),
                         f'.{os.path.basename(output)}.exporting-{os.getpid()}')
  shutil.rmtree(staging, ignore_errors=True)
  try:
    files.save_hf(staging, exported.hf, exported.tensors)
    written = exported.write_files(staging)
    if os.path.isdir(output):
      os.rmdir(output)  # empty, checked above
    os.rename(staging, output)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return (f'{exported.name}, {len(exported.tensors)} tensors, step '
          f'{restored.step}; {written.replace(staging, output)}')


def _check_exported(workdir: str, config: ml_collections.ConfigDict) -> None:
  """Refuses, before anything is restored, a task or model family that
  has no Hugging Face counterpart."""
  if config.task not in EXPORTED_TASKS:
    raise ValueError(
        f'{workdir} trained a {config.task!r} task: export writes '
        + ', '.join(f'{task} ({family})'
                    for task, family in EXPORTED_TASKS.items())
        + ' models, which transformers loads.')
  family = config.model.get('family', 'transformer')
  if config.task == 'translation' and family != 'transformer':
    raise ValueError(
        f'{workdir} trained a {family!r} translation model, which Marian (a '
        f'Transformer encoder-decoder) cannot compute: export translation '
        f"models of model.family='transformer'.")


def _language_model(task, params, config, workdir) -> _Export:
  family = (llama if task.model_config.positional_encoding == 'rotary'
            else gpt2)
  hf, tensors = family.to_hf(params, task.model_config,
                             getattr(task.tokenizer, 'ids', None))
  return _text_export('Llama' if family is llama else 'GPT-2', hf, tensors,
                      task, config, workdir)


def _bert(task, params, config, workdir) -> _Export:
  hf, tensors = bert.to_hf(params, task.model_config,
                           getattr(task.tokenizer, 'ids', None))
  return _text_export(f'BERT ({hf["architectures"][0]})', hf, tensors, task,
                      config, workdir)


def _text_export(name: str, hf: dict[str, Any],
                 tensors: dict[str, np.ndarray], task,
                 config: ml_collections.ConfigDict, workdir: str) -> _Export:
  hf.update(_special_ids(task.tokenizer, config.task))
  return _Export(name, hf, tensors, lambda output: _tokenizer_files(
      config.data.tokenizer, workdir, output, hf))


def _vit(task, params, config, workdir) -> _Export:
  """ViTForImageClassification with the workdir's class names, and the
  image processor of its task's inputs."""
  del workdir  # the task holds what the files need
  hf, tensors = vit.to_hf(params, task.model_config, list(task.class_names))
  if config.train.loss == 'sigmoid':  # independent classes: pipelines
    hf['problem_type'] = 'multi_label_classification'  # apply a sigmoid
  processor = vit.image_processor(config.data.image_size,
                                  config.data.load_size, task.num_channels)

  def write_files(output: str) -> str:
    _write_json(os.path.join(output, 'preprocessor_config.json'), processor)
    return (f'preprocessor_config.json (ViTImageProcessor) in {output}, '
            f'{len(task.class_names)} class names in config.json')
  return _Export(f'ViT ({hf["architectures"][0]})', hf, tensors, write_files)


def _marian(task, params, config, workdir) -> _Export:
  """MarianMTModel, in OPUS-MT's ids for a converted workdir, in ours for
  a vocabulary built here."""
  model = task.model_config
  ids = (marian.published_order(model.vocab_size)
         if config.data.tokenizer == 'marian' else None)
  hf, tensors = marian.to_hf(params, model, ids)
  return _Export('Marian (MarianMTModel)', hf, tensors,
                 lambda output: _marian_tokenizer_files(
                     task.tokenizer, config, workdir, output, ids))


_EXPORTERS = {'language_modeling': _language_model,
              'masked_language_modeling': _bert,
              'text_classification': _bert,
              'image_classification': _vit,
              'translation': _marian}


def _published(tokenizer, our_id: int) -> int:
  ids = getattr(tokenizer, 'ids', None)
  return our_id if ids is None else int(ids.to_published(our_id))


def _special_ids(tokenizer, task: str) -> dict[str, Any]:
  """config.json's special ids, in the exported ids: EOS (BERT: [SEP]
  ends its texts; our EOS is its [CLS]), BOS, and padding where the
  vocabulary has one."""
  ids = getattr(tokenizer, 'ids', None)
  special = {'pad_token_id': None if ids is not None and ids.added_padding
             else _published(tokenizer, tokenization.PAD_ID)}
  if task == 'language_modeling':
    start = getattr(tokenizer, 'start_id', tokenization.EOS_ID)
    special.update(eos_token_id=_published(tokenizer, tokenization.EOS_ID),
                   bos_token_id=_published(tokenizer, start))
  return special


def _write_json(path: str, value: dict) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=2, ensure_ascii=False)


def _tokenizer_files(kind: str, workdir: str, output: str, hf: dict) -> str:
  """Writes the tokenizer files of a converted workdir as it was published,
  or copies a vocabulary built here; says which."""
  vocab = storage.fetch_folder(storage.join(workdir, 'vocab'))
  settings = {'model_max_length': hf.get('n_positions') or hf.get(
      'max_position_embeddings')}
  if kind == 'gpt2':
    tokenizer = published_tokenizers.GPT2Tokenizer(vocab)
    eos = tokenizer.id_to_piece(tokenization.EOS_ID)
    shutil.copy(os.path.join(vocab, published_tokenizers.GPT2_FILES[0]),
                os.path.join(output, 'tokenizer.json'))
    settings.update(tokenizer_class='GPT2TokenizerFast', bos_token=eos,
                    eos_token=eos, unk_token=eos)
  elif kind == 'llama':
    tokenizer = published_tokenizers.LlamaTokenizer(vocab)
    json_file = os.path.join(vocab, published_tokenizers.LLAMA_JSON)
    if os.path.exists(json_file):
      shutil.copy(json_file, os.path.join(output, 'tokenizer.json'))
      settings['tokenizer_class'] = 'PreTrainedTokenizerFast'
    else:
      shutil.copy(os.path.join(vocab, published_tokenizers.LLAMA_SPM),
                  os.path.join(output, 'tokenizer.model'))
      # As Llama's published tokenizer_config.json: BOS before each text
      # (a tokenizer.json says so in its own post-processor).
      settings.update(tokenizer_class='LlamaTokenizer', add_bos_token=True,
                      add_eos_token=False)
    settings.update(bos_token=tokenizer.id_to_piece(tokenizer.start_id),
                    eos_token=tokenizer.id_to_piece(tokenization.EOS_ID))
  elif kind == 'bert':
    source = os.path.join(vocab, published_tokenizers.BERT_FILES[0])
    if not os.path.exists(source):
      raise ValueError(f'{vocab} holds the vocab.txt of an older convert: '
                       f'convert the checkpoint again to export it.')
    shutil.copy(source, os.path.join(output, 'tokenizer.json'))
    settings.update(tokenizer_class='BertTokenizerFast', cls_token='[CLS]',
                    sep_token='[SEP]', pad_token='[PAD]', unk_token='[UNK]',
                    mask_token='[MASK]')
  else:
    shutil.copytree(vocab, os.path.join(output, 'vocab'))
    return (f'the tokenizer ({kind}) was built here and has no Hugging Face '
            f'class: its files are in {output}/vocab, ids padding 0, EOS 1')
  _write_json(os.path.join(output, 'tokenizer_config.json'), settings)
  return f'the published tokenizer ({kind}) in {output}'


def _marian_tokenizer_files(tokenizer, config: ml_collections.ConfigDict,
                            workdir: str, output: str, ids) -> str:
  """source.spm, target.spm, vocab.json and tokenizer_config.json, as
  transformers' MarianTokenizer reads them: a converted workdir's
  SentencePiece models as published, or the SentencePiece model built here
  on both sides (the one vocabulary of source and target); vocab.json
  numbers the pieces in the model's ids (`ids`: ours -> the published
  ones; None: ours)."""
  vocab = storage.fetch_folder(storage.join(workdir, 'vocab'))
  models = ((marian.SOURCE_SPM, marian.TARGET_SPM) if ids is not None
            else ('spm.model', 'spm.model'))
  for model, name in zip(models, (marian.SOURCE_SPM, marian.TARGET_SPM)):
    shutil.copy(os.path.join(vocab, model), os.path.join(output, name))
  pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
  numbers = range(len(pieces)) if ids is None else ids.order.tolist()
  _write_json(os.path.join(output, marian.VOCAB),
              {piece: int(i) for piece, i in zip(pieces, numbers)})
  _write_json(os.path.join(output, 'tokenizer_config.json'), {
      'tokenizer_class': 'MarianTokenizer',
      'source_lang': config.data.source_lang,
      'target_lang': config.data.target_lang,
      'model_max_length': config.data.max_length, 'separate_vocabs': False,
      'pad_token': pieces[tokenization.PAD_ID],
      'eos_token': pieces[tokenization.EOS_ID],
      'unk_token': pieces[tokenization.UNK_ID]})
  kind = 'published' if ids is not None else 'built here, our ids'
  return f'the Marian tokenizer ({kind}) in {output}'
