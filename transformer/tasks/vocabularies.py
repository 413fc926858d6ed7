"""The vocabularies of text tasks: built once from the training text and
kept in the workdir's vocab/ folder, or a converted checkpoint's."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Iterable

import jax
from jax.experimental import multihost_utils
import ml_collections

from transformer import checkpoints
from transformer.data import files
from transformer.data import tokenizers
from transformer.interop import vocabularies as published


def in_workdir(workdir: str, filename: str,
               build: Callable[[str], Any]) -> str:
  """The path of a task's vocabulary file, `workdir/vocab/filename`.

  Process 0 calls `build(path)` (which reuses a file already there, e.g.
  `tokenizers.load_or_train`); the other processes wait for it. A workdir
  that has checkpoints but lost its vocabulary is refused: a new one would
  not match the ids the checkpoints were trained with.
  """
  path = files.join(workdir, 'vocab', filename)
  if not files.exists(path) and checkpoints.exist(workdir):
    raise FileNotFoundError(
        f'{path} is missing but {workdir} has checkpoints: a new vocabulary '
        f'would not match them. Restore the file or use a new workdir.')
  if not files.is_remote(path):
    if jax.process_index() == 0:
      build(path)
    _sync(filename)
    return path
  # Tokenizer libraries read local files: build into the local mirror,
  # then keep the workdir's copy the one every run and host reads.
  local = files.local_mirror(path)
  if jax.process_index() == 0:
    if files.exists(path):
      files.fetch(path)
    elif os.path.exists(local):
      os.remove(local)  # of an earlier run: never reused unseen
    build(local)
    if not files.exists(path):
      with open(local, 'rb') as f:
        files.write_atomically(path, f.read())
  _sync(filename)
  return files.fetch(path)


def _sync(filename: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'{filename} written')


def describe(workdir: str) -> str:
  """The workdir's vocabulary file, or its folder where it has several."""
  folder = files.join(workdir, 'vocab')
  names = files.listdir(folder)
  if len(names) == 1:
    return files.join(folder, names[0])
  return f'the vocabulary files in {folder}'


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
  folder = files.join(workdir, 'vocab')
  if files.exists(folder):
    for name, path in files.walk_files(folder):
      hasher.update(name.encode() + b'\0' + path.read_bytes())
  return hasher.hexdigest()


def published_tokenizer(name: str, workdir: str):
  """The converted checkpoint's tokenizer kept in `workdir/vocab`."""
  return PUBLISHED_TOKENIZERS[name](
      files.fetch_folder(files.join(workdir, 'vocab')))


def text_tokenizer(data: ml_collections.ConfigDict, workdir: str,
                   texts: Callable[[], Iterable[str]]):
  """The tokenizer `data.tokenizer` names ('byte', 'char', 'word' or
  'sentencepiece' of `data.vocab_size` pieces of `data.tokenizer_model_type`),
  its vocabulary built from `texts()` once and kept in the workdir, or a
  converted checkpoint's (`PUBLISHED_TOKENIZERS`)."""
  if data.tokenizer in PUBLISHED_TOKENIZERS:
    return published_tokenizer(data.tokenizer, workdir)
  if data.tokenizer == 'byte':
    return tokenizers.ByteTokenizer()
  names = {'char': 'chars.json', 'word': 'words.json',
           'sentencepiece': 'spm.model'}
  if data.tokenizer not in names:
    raise ValueError(f"config.data.tokenizer={data.tokenizer!r}; choose "
                     f"'byte' or one of {sorted(names)} (or, for converted "
                     f"checkpoints, {tuple(PUBLISHED_TOKENIZERS)}).")
  built = {'char': tokenizers.CharTokenizer, 'word': tokenizers.WordTokenizer}
  if data.tokenizer in built:
    kind = built[data.tokenizer]
    return kind(in_workdir(
        workdir, names[data.tokenizer],
        lambda path: kind.load_or_build(path, texts)))
  return tokenizers.SentencePieceTokenizer(in_workdir(
      workdir, names[data.tokenizer],
      lambda path: tokenizers.load_or_train(
          path, texts, data.vocab_size,
          model_type=data.tokenizer_model_type)))
