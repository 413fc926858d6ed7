"""The vocabularies of text tasks: built once from the training text and
kept in the workdir's vocab/ folder, or a converted checkpoint's."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import jax
from jax.experimental import multihost_utils
import ml_collections

from transformer import checkpoints
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
  path = os.path.join(workdir, 'vocab', filename)
  if not os.path.exists(path) and checkpoints.exist(workdir):
    raise FileNotFoundError(
        f'{path} is missing but {workdir} has checkpoints: a new vocabulary '
        f'would not match them. Restore the file or use a new workdir.')
  if jax.process_index() == 0:
    build(path)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'{filename} written')
  return path


# Vocabularies that come with converted checkpoints (`tools/convert.py`
# writes them into the workdir's vocab/ folder).
PUBLISHED_TOKENIZERS = {'marian': published.MarianTokenizer,
                        'gpt2': published.GPT2Tokenizer,
                        'bert': published.BertTokenizer}


def published_tokenizer(name: str, workdir: str):
  """The converted checkpoint's tokenizer kept in `workdir/vocab`."""
  return PUBLISHED_TOKENIZERS[name](os.path.join(workdir, 'vocab'))


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
  files = {'char': 'chars.json', 'word': 'words.json',
           'sentencepiece': 'spm.model'}
  if data.tokenizer not in files:
    raise ValueError(f"config.data.tokenizer={data.tokenizer!r}; choose "
                     f"'byte' or one of {sorted(files)} (or, for converted "
                     f"checkpoints, {tuple(PUBLISHED_TOKENIZERS)}).")
  built = {'char': tokenizers.CharTokenizer, 'word': tokenizers.WordTokenizer}
  if data.tokenizer in built:
    kind = built[data.tokenizer]
    return kind(in_workdir(
        workdir, files[data.tokenizer],
        lambda path: kind.load_or_build(path, texts)))
  return tokenizers.SentencePieceTokenizer(in_workdir(
      workdir, files[data.tokenizer],
      lambda path: tokenizers.load_or_train(
          path, texts, data.vocab_size,
          model_type=data.tokenizer_model_type)))
