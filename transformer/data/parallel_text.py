"""Parallel corpora from local text files, one sentence per line.

A corpus is a folder of `{split}.{lang}` or `{split}.{lang}.gz` UTF-8 files
whose lines correspond across languages, the layout of Multi30k:

    train.de.gz  train.en.gz  val.de.gz  val.en.gz
    test_2016_flickr.de.gz  test_2016_flickr.en.gz
"""

from __future__ import annotations

import os

from absl import logging

from transformer.data import reading

_GZ = '.gz'


def _split_and_lang(filename: str) -> tuple[str, str] | None:
  name = filename.removesuffix(_GZ)
  split, dot, lang = name.rpartition('.')
  return (split, lang) if dot and split and lang else None


def _check_folder(folder: str) -> None:
  if not os.path.isdir(folder):
    raise FileNotFoundError(
        f'Parallel text folder {folder!r} does not exist. Pass the folder '
        'that holds files named {split}.{lang} or {split}.{lang}.gz, e.g. '
        'train.de.gz and train.en.gz.')


def available_splits(folder: str, source_lang: str,
                     target_lang: str) -> list[str]:
  """Returns the sorted splits that have files for both languages."""
  _check_folder(folder)
  langs_by_split = {}
  for filename in os.listdir(folder):
    if parsed := _split_and_lang(filename):
      split, lang = parsed
      langs_by_split.setdefault(split, set()).add(lang)
  return sorted(split for split, langs in langs_by_split.items()
                if {source_lang, target_lang} <= langs)


def _find_file(folder: str, split: str, lang: str) -> str:
  """Returns the path of `{split}.{lang}` or `{split}.{lang}.gz`."""
  candidates = [os.path.join(folder, f'{split}.{lang}{suffix}')
                for suffix in ('', _GZ)]
  found = [path for path in candidates if os.path.isfile(path)]
  if len(found) == 2:
    raise ValueError(f'Both {found[0]} and {found[1]} exist; remove one so '
                     'that it is clear which to read.')
  if not found:
    raise FileNotFoundError(
        f'No {lang!r} file for split {split!r} in {folder}: expected '
        f'{split}.{lang} or {split}.{lang}.gz. Files there: '
        f'{sorted(os.listdir(folder))}.')
  return found[0]


def read_parallel(folder: str, split: str, source_lang: str,
                  target_lang: str) -> list[tuple[str, str]]:
  """Returns the (source, target) sentence pairs of a split.

  Pairs where either side is empty are dropped, with a warning that counts
  them.

  Raises:
    FileNotFoundError: the folder or a file of the split is missing.
    ValueError: the two sides have different numbers of lines.
  """
  _check_folder(folder)
  source_path = _find_file(folder, split, source_lang)
  target_path = _find_file(folder, split, target_lang)
  sources = [line.rstrip() for line in reading.lines(source_path)]
  targets = [line.rstrip() for line in reading.lines(target_path)]
  if not sources and not targets:
    raise ValueError(f'{source_path} and {target_path} are empty: the '
                     f'{split!r} split needs a sentence per line in each. '
                     f'Fill them, or point config.data.path at the corpus.')
  if len(sources) != len(targets):
    raise ValueError(
        f'Line counts differ: {len(sources)} in {source_path} and '
        f'{len(targets)} in {target_path}. Line i of one must translate '
        'line i of the other; fix or realign the files.')
  pairs = [(s, t) for s, t in zip(sources, targets) if s and t]
  if dropped := len(sources) - len(pairs):
    logging.warning('Dropped %d of %d pairs of %s/%s.{%s,%s} with an empty '
                    'side.', dropped, len(sources), folder, split,
                    source_lang, target_lang)
  if not pairs:
    raise ValueError(f'{source_path} and {target_path} have no line pair '
                     f'with both sides non-empty ({len(sources)} lines, each '
                     f'with an empty side): line i of one must translate line '
                     f'i of the other.')
  return pairs
