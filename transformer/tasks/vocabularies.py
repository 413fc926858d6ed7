"""The vocabularies of text tasks: built once from the training text and
kept in the workdir's vocab/ folder, or a converted checkpoint's.

What a vocabulary was built from (the task, the vocabulary settings and
the data settings that decide the training text) is recorded beside it in
WORKDIR/vocab_built_from.json before it is built (`check_built_from`): a
later run with other settings rebuilds it while no checkpoint depends on
it, and is refused once one does.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable, Iterable

import jax
from jax.experimental import multihost_utils
import ml_collections

from transformer import checkpoints
from transformer import storage
from transformer.data import published_tokenizers as published
from transformer.data import tokenization


def in_workdir(workdir: str, filename: str,
               build: Callable[[str], Any]) -> str:
  """The path of a task's vocabulary file, `workdir/vocab/filename`.

  Process 0 calls `build(path)` (which reuses a file already there, e.g.
  `tokenization.load_or_train`); the other processes wait for it. A workdir
  that has checkpoints but lost its vocabulary is refused: a new one would
  not match the ids the checkpoints were trained with.
  """
  path = storage.join(workdir, 'vocab', filename)
  if not storage.exists(path) and checkpoints.exist(workdir):
    raise FileNotFoundError(
        f'{path} is missing but {workdir} has checkpoints: a new vocabulary '
        f'would not match them. Restore the file or use a new workdir.')
  if not storage.is_remote(path):
    if jax.process_index() == 0:
      build(path)
    _sync(filename)
    return path
  # Tokenizer libraries read local files: build into the local mirror,
  # then keep the workdir's copy the one every run and host reads.
  local = storage.local_mirror(path)
  if jax.process_index() == 0:
    if storage.exists(path):
      storage.fetch(path)
    elif os.path.exists(local):
      os.remove(local)  # of an earlier run: never reused unseen
    build(local)
    if not storage.exists(path):
      with open(local, 'rb') as f:
        storage.write_atomically(path, f.read())
  _sync(filename)
  return storage.fetch(path)


def copy_from(source: str, workdir: str, *, required: bool = False) -> None:
  """Copies the vocabulary files of `source` (a `train.init_from` workdir)
  that `workdir/vocab` lacks, on process 0 (the others wait): a run that
  starts from a checkpoint reads text with the ids it was trained with, and
  builds no vocabulary of its own. Files already there are kept, so a
  rerun reads what its own checkpoints were trained with.

  Raises:
    FileNotFoundError: `required` and `source` has no vocab/ folder (a new
      vocabulary would not match its checkpoints' embeddings).
  """
  vocab = storage.path(source) / 'vocab'
  if required and not vocab.is_dir() and not (
      storage.path(workdir) / 'vocab').is_dir():
    raise FileNotFoundError(
        f'{vocab} is missing: the tokenizer the checkpoints of {source} were '
        f'trained with is gone, and a new one would not match their '
        f'embeddings. Restore that folder, or convert the checkpoint again.')
  if jax.process_index() == 0 and vocab.is_dir():
    ours = storage.path(workdir) / 'vocab'
    ours.mkdir(parents=True, exist_ok=True)
    for file in vocab.iterdir():
      if not (ours / file.name).exists():
        file.copy(ours / file.name)
  _sync('vocabulary copied')


def _sync(filename: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'{filename} written')


def describe(workdir: str) -> str:
  """The workdir's vocabulary file, or its folder where it has several."""
  folder = storage.join(workdir, 'vocab')
  names = storage.listdir(folder)
  if len(names) == 1:
    return storage.join(folder, names[0])
  return f'the vocabulary files in {folder}'


class StandIn:
  """The vocabulary of a task built with `shapes_only=True` (`stand_in`):
  as many ids as `config.data.vocab_size`, nothing to encode with (a plan
  compiles the model and reads no text)."""

  def __init__(self, vocab_size: int):
    self.vocab_size = vocab_size

  def encode_batch(self, *args, **kwargs):
    raise TypeError('A stand-in vocabulary (a task built with shapes_only) '
                    'has no tokens: build the task from the data to encode.')

  decode_batch = decode = encode = encode_batch


def stand_in(data: ml_collections.ConfigDict):
  """A `shapes_only` task's vocabulary: bytes' own (they need no data),
  else `StandIn` of `data.vocab_size` ids (for 'char' and 'word', which
  learn theirs from the text, an assumed size: set vocab_size to plan
  with theirs)."""
  if data.get('tokenizer') == 'byte':
    return tokenization.ByteTokenizer()
  return StandIn(data.vocab_size)


# Vocabularies that come with converted checkpoints (`tools/convert.py`
# writes them into the workdir's vocab/ folder).
PUBLISHED_TOKENIZERS = {'marian': published.MarianTokenizer,
                        'gpt2': published.GPT2Tokenizer,
                        'bert': published.BertTokenizer,
                        'llama': published.LlamaTokenizer}


def fingerprint(workdir: str, tokenizer: str) -> str:
  """A hash of the tokenizer's kind and the workdir's vocabulary files:
  what decides the ids a text gets (it keys the token cache)."""
  hasher = hashlib.blake2b(tokenizer.encode(), digest_size=16)
  folder = storage.join(workdir, 'vocab')
  if storage.exists(folder):
    for name, path in storage.walk_files(folder):
      hasher.update(name.encode() + b'\0' + path.read_bytes())
  return hasher.hexdigest()


def published_tokenizer(name: str, workdir: str):
  """The converted checkpoint's tokenizer kept in `workdir/vocab`."""
  return PUBLISHED_TOKENIZERS[name](
      storage.fetch_folder(storage.join(workdir, 'vocab')))


def text_tokenizer(data: ml_collections.ConfigDict, workdir: str,
                   texts: Callable[[], Iterable[str]]):
  """The tokenizer `data.tokenizer` names ('byte', 'char', 'word' or
  'sentencepiece' of `data.vocab_size` pieces of `data.tokenizer_model_type`),
  its vocabulary built from `texts()` once and kept in the workdir, or a
  converted checkpoint's (`PUBLISHED_TOKENIZERS`)."""
  if data.tokenizer in PUBLISHED_TOKENIZERS:
    return published_tokenizer(data.tokenizer, workdir)
  if data.tokenizer == 'byte':
    return tokenization.ByteTokenizer()
  names = {'char': 'chars.json', 'word': 'words.json',
           'sentencepiece': 'spm.model'}
  if data.tokenizer not in names:
    raise ValueError(f"config.data.tokenizer={data.tokenizer!r}; choose "
                     f"'byte' or one of {sorted(names)} (or, for converted "
                     f"checkpoints, {tuple(PUBLISHED_TOKENIZERS)}).")
  built = {'char': tokenization.CharTokenizer, 'word': tokenization.WordTokenizer}
  if data.tokenizer in built:
    kind = built[data.tokenizer]
    return kind(in_workdir(
        workdir, names[data.tokenizer],
        lambda path: kind.load_or_build(path, texts)))
  return tokenization.SentencePieceTokenizer(in_workdir(
      workdir, names[data.tokenizer],
      lambda path: tokenization.load_or_train(
          path, texts, data.vocab_size,
          model_type=data.tokenizer_model_type)))


# -- What a vocabulary was built from ------------------------------------------

# In the workdir beside vocab/, not in it: tasks starting from
# `train.init_from` copy that workdir's vocab/ folder.
RECORD = 'vocab_built_from.json'
# Settings whose change gives other ids: refused once checkpoints exist.
VOCABULARY_SETTINGS = ('task', 'data.tokenizer', 'data.vocab_size',
                       'data.tokenizer_model_type', 'data.character_coverage')
# Data settings that leave the training text as it is (batching, lengths,
# evaluation, masking, images, where a dataset is stored); every other
# data setting may decide it (source, path, languages, split, counts, seed).
_NOT_TEXT = frozenset({
    'batch_size', 'eval_batch_size', 'tokens_per_batch', 'batch_rows',
    'packing', 'length_multiple', 'eval_rows', 'max_length', 'too_long',
    'eval_split', 'eval_path', 'mask_rate',
    'next_sentence', 'shift_chunks', 'word_mask_rate', 'region_mask_rate',
    'swap_rate', 'hard_negative_rate', 'image_size', 'patch_size',
    'max_objects', 'tfds_data_dir', 'class_names', 'num_classes'})


def built_from(config: ml_collections.ConfigDict) -> dict[str, Any] | None:
  """{setting: value} of what the vocabulary of `config` is built from:
  the task, `train.init_from` (whose vocabulary some tasks copy) and the
  data settings but those of `_NOT_TEXT`; None where no vocabulary is
  built (bytes, images, a converted checkpoint's)."""
  data = config.get('data')
  if data is None or data.get('tokenizer') in (None, 'byte',
                                               *PUBLISHED_TOKENIZERS):
    return None
  settings = {'task': config.task,
              'train.init_from': config.train.get('init_from', '')}
  for key, value in json.loads(data.to_json_best_effort()).items():
    if key not in _NOT_TEXT:
      settings[f'data.{key}'] = value
  return settings


def check_built_from(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Before a training run builds its task: a vocabulary in the workdir
  built from other settings (`built_from`, recorded in `RECORD`) is
  rebuilt where no checkpoint depends on it yet (a run refused or killed
  before its first checkpoint left it), and refused where one does and a
  setting of `VOCABULARY_SETTINGS` changed (other training text for
  trained checkpoints is applied, as other config changes are). Where no
  vocabulary is there yet, what it will be built from is recorded first,
  so that no vocabulary is ever without its record. A vocabulary without
  a record (an older version's, or one copied from `train.init_from`) is
  used as it is."""
  wanted = built_from(config)
  if wanted is None:
    return
  rebuild = _rebuild(workdir, wanted)
  _sync(f'{RECORD} read')  # by every process, before process 0 changes it
  if rebuild is not None and jax.process_index() == 0:
    if rebuild:
      storage.path(storage.join(workdir, 'vocab')).rmtree()
    storage.write_atomically(storage.join(workdir, RECORD),
                           json.dumps(wanted, indent=1))
  _sync(RECORD)


def _rebuild(workdir: str, wanted: dict[str, Any]) -> bool | None:
  """Whether to remove the vocabulary before recording `wanted` (False: to
  record it, nothing being built yet; None: to leave both as they are)."""
  folder, path = storage.join(workdir, 'vocab'), storage.join(workdir, RECORD)
  trained = checkpoints.exist(workdir)
  if not storage.listdir(folder):
    return None if trained else False
  if not storage.exists(path):
    return None
  recorded = storage.read_record(path, record_problem)
  changed = {key: (recorded.get(key), wanted.get(key))
             for key in sorted(set(recorded) | set(wanted))
             if recorded.get(key) != wanted.get(key)}
  if not changed:
    return None
  if trained:
    refused = {key: change for key, change in changed.items()
               if key in VOCABULARY_SETTINGS}
    if refused:
      raise checkpoints.incompatible(
          refused, f'the vocabulary in {folder} the checkpoints were '
          f'trained with was built with other settings')
    return None
  listed = ', '.join(f'{key}={old!r} (this run: {new!r})'
                     for key, (old, new) in changed.items())
  print(f'Rebuilding the vocabulary in {folder}: it was built with '
        f'{listed}, and no checkpoint depends on it yet.', flush=True)
  return True


def record_problem(record: Any) -> str:
  """vocab_built_from.json: {"data.vocab_size": 300, "task": ..., ...},
  setting names and their JSON values."""
  if not isinstance(record, dict):
    return f'not a JSON object but {type(record).__name__}'
  for key, value in record.items():
    if isinstance(value, dict):
      return f'"{key}" is {storage.shown(value)}, not a setting\'s value'
  return ''
