"""GLUE (Wang et al. 2018): every task's data, from the official TSV files
or TFDS `glue/*`, and offline sentence-pair tasks generated from the
grammar, as rows (sentence a, sentence b or None, label).

Labels follow TFDS's numbering (MNLI: 0 entailment, 1 neutral, 2
contradiction; QNLI and RTE: 0 entailment, 1 not_entailment; the binary
tasks as GLUE's files number them); STS-B's is a float similarity in
[0, 5]. Each task's metrics are those the GLUE leaderboard reports.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random

from absl import logging

from transformer.data import reading
from transformer.data.generated import offline_mt

Row = tuple[str, 'str | None', float]


@dataclasses.dataclass(frozen=True)
class Spec:
  """One GLUE task: where its sentences and label are, what it scores."""
  tfds_features: tuple[str, ...]  # a, [b,] label
  tsv_columns: tuple  # header names of a, [b,] label; or their indices
  num_classes: int  # 1: regression
  metrics: tuple[str, ...]
  label_names: tuple[str, ...] = ()  # text labels of the TSV files, in order
  tsv_header: bool = True
  # Extra evaluation splits: name -> (TFDS split, TSV file stem).
  extra_eval: tuple[tuple[str, str, str], ...] = ()
  eval_split: tuple[str, str] = ('validation', 'dev')  # TFDS, TSV

  @property
  def pair(self) -> bool:
    return len(self.tfds_features) == 3


TASKS = {
    'cola': Spec(('sentence', 'label'), (3, 1), 2, ('matthews',),
                 tsv_header=False),
    'sst2': Spec(('sentence', 'label'), ('sentence', 'label'), 2,
                 ('accuracy',)),
    'mrpc': Spec(('sentence1', 'sentence2', 'label'),
                 ('#1 String', '#2 String', 'Quality'), 2,
                 ('f1', 'accuracy')),
    'qqp': Spec(('question1', 'question2', 'label'),
                ('question1', 'question2', 'is_duplicate'), 2,
                ('f1', 'accuracy')),
    'stsb': Spec(('sentence1', 'sentence2', 'label'),
                 ('sentence1', 'sentence2', 'score'), 1,
                 ('pearson', 'spearman')),
    'mnli': Spec(('premise', 'hypothesis', 'label'),
                 ('sentence1', 'sentence2', 'gold_label'), 3, ('accuracy',),
                 label_names=('entailment', 'neutral', 'contradiction'),
                 eval_split=('validation_matched', 'dev_matched'),
                 extra_eval=(('mismatched', 'validation_mismatched',
                              'dev_mismatched'),)),
    'qnli': Spec(('question', 'sentence', 'label'),
                 ('question', 'sentence', 'label'), 2, ('accuracy',),
                 label_names=('entailment', 'not_entailment')),
    'rte': Spec(('sentence1', 'sentence2', 'label'),
                ('sentence1', 'sentence2', 'label'), 2, ('accuracy',),
                label_names=('entailment', 'not_entailment')),
    'wnli': Spec(('sentence1', 'sentence2', 'label'),
                 ('sentence1', 'sentence2', 'label'), 2, ('accuracy',)),
}
# The offline pair tasks (`offline_pairs`), scored like their GLUE models.
OFFLINE = {
    'entailment': Spec(('a', 'b', 'label'), (), 3, ('accuracy',),
                       label_names=('entailment', 'neutral',
                                    'contradiction')),
    'paraphrase': Spec(('a', 'b', 'label'), (), 2, ('f1', 'accuracy')),
}


def spec(task: str) -> Spec:
  if task in TASKS:
    return TASKS[task]
  if task in OFFLINE:
    return OFFLINE[task]
  raise ValueError(f'Unknown GLUE task {task!r}; choose one of '
                   f'{(*TASKS, *OFFLINE)}.')


# The similarity scores of STS-B, the one regression task.
SCORE_RANGE = (0, 5)


def _label(value: str, task: Spec, where: str) -> float:
  value = value.strip()
  if task.label_names and value in task.label_names:
    return float(task.label_names.index(value))
  try:
    number = float(value)
  except ValueError:
    raise ValueError(f'{where}: label {value!r} is not one of '
                     f'{task.label_names or "the numbers"}.') from None
  if not math.isfinite(number):  # float() reads 'nan' and 'inf' too
    raise ValueError(f'{where}: label {value!r} is not a finite number; '
                     f'fix or delete that line.')
  if task.num_classes > 1 and number not in range(task.num_classes):
    raise ValueError(f'{where}: label {value!r} is outside 0..'
                     f'{task.num_classes - 1}.')
  low, high = SCORE_RANGE
  if task.num_classes == 1 and not low <= number <= high:
    raise ValueError(f'{where}: score {value!r} is outside {low}..{high}; '
                     f'fix or delete that line.')
  return number


def read_tsv(name: str, path: str) -> list[Row]:
  """The rows of a GLUE task's TSV file as the benchmark distributes it
  (header and all; CoLA's have none). Lines with too few fields (QQP's
  train.tsv has some) are counted, reported and left out; a label that is
  not the task's is an error naming the line."""
  task = spec(name)
  lines = [(number, line.rstrip('\r').split('\t'))
           for number, line in enumerate(reading.lines(path), 1)
           if line.strip()]
  columns = task.tsv_columns
  if task.tsv_header:
    if not lines:
      raise ValueError(f'{path} is empty: a GLUE {name} file starts with its '
                       f'header line.')
    header = lines[0][1]
    missing = [c for c in columns if c not in header]
    if missing:
      raise ValueError(f'{path}: the header has no column {missing[0]!r} of '
                       f'GLUE {name} ({header}); is this the {name} file?')
    columns = [header.index(c) for c in columns]
    lines = lines[1:]
  needed = max(columns) + 1
  short = [number for number, fields in lines if len(fields) < needed]
  if short:
    logging.warning('%s: left out %d lines with fewer than %d fields '
                    '(first: line %d).', path, len(short), needed, short[0])
  rows = []
  for number, fields in lines:
    if len(fields) < needed:
      continue
    a = fields[columns[0]]
    b = fields[columns[1]] if task.pair else None
    rows.append((a, b, _label(fields[columns[-1]], task,
                              f'{path} line {number}')))
  return rows


# The folder of each task in GLUE's download (its download_glue_data.py),
# e.g. glue_data/STS-B/train.tsv.
FOLDERS = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'qqp': 'QQP',
           'stsb': 'STS-B', 'mnli': 'MNLI', 'qnli': 'QNLI', 'rte': 'RTE',
           'wnli': 'WNLI'}


def tsv_path(folder: str, name: str, split: str) -> str:
  """The file of `split` ('train', 'dev', 'dev_matched', ...)."""
  path = os.path.join(folder, f'{split}.tsv')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'{path} not found: config.data.path must be the GLUE folder of '
        f'{name} ({split}.tsv as GLUE distributes it).')
  return path


def read_tfds(name: str, split: str, data_dir: str | None,
              max_examples: int | None = None) -> list[Row]:
  """The rows of TFDS `glue/NAME` (prepared with `tfds build`)."""
  from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
  task = spec(name)
  examples = tfds_reader.load_features(f'glue/{name}', split, data_dir,
                                       task.tfds_features,
                                       max_examples=max_examples)
  return [(row[0], row[1] if task.pair else None, float(row[-1]))
          for row in examples]


def _without_adjectives(phrase: offline_mt.NounPhrase
                        ) -> offline_mt.NounPhrase:
  return dataclasses.replace(phrase, adjectives=())


def _other(rng: random.Random, choices, current):
  return rng.choice([c for c in choices if c != current])


def offline_pairs(name: str, num_examples: int, seed: int,
                  split: str) -> list[Row]:
  """Generated sentence pairs whose label needs both sentences.

  'entailment' (3 classes, MNLI's order): b is a with its modifiers
  dropped (entailment: less specific, still true), a with an adjective
  added (neutral: more specific, not implied), or a with its verb or a
  noun replaced (contradiction: another event). 'paraphrase' (binary): 1 if
  b names the same subject, verb and object as a, however its determiners
  and adjectives differ; 0 if one of the three differs.
  """
  spec(name)
  rng = random.Random(f'glue:{name}:{split}:{seed}')
  rows = []
  while len(rows) < num_examples:
    a = offline_mt.sample_sentence(rng)
    kind = rng.randrange(3 if name == 'entailment' else 2)
    if name == 'entailment':
      if kind == 0:
        if not (a.subject.adjectives or a.object.adjectives
                or a.preposition):
          continue  # nothing to drop
        b = dataclasses.replace(
            a, subject=_without_adjectives(a.subject),
            object=_without_adjectives(a.object), preposition=None,
            prepositional_object=None)
      elif kind == 1:
        free = [x for x in offline_mt.ADJECTIVES
                if x not in a.subject.adjectives]
        if len(a.subject.adjectives) >= offline_mt.MAX_ADJECTIVES:
          continue
        b = dataclasses.replace(a, subject=dataclasses.replace(
            a.subject, adjectives=(rng.choice(free),)
            + a.subject.adjectives))
      else:
        b = (dataclasses.replace(a, verb=_other(rng, offline_mt.VERBS,
                                                a.verb))
             if rng.random() < 0.5 else dataclasses.replace(
                 a, object=dataclasses.replace(
                     a.object, noun=_other(rng, offline_mt.NOUNS,
                                           a.object.noun))))
    else:
      rewritten = offline_mt.sample_sentence(rng)  # other modifiers
      b = dataclasses.replace(
          rewritten, verb=a.verb,
          subject=dataclasses.replace(rewritten.subject, noun=a.subject.noun),
          object=dataclasses.replace(rewritten.object, noun=a.object.noun))
      if kind == 0:
        field = rng.choice(('subject', 'verb', 'object'))
        if field == 'verb':
          b = dataclasses.replace(b, verb=_other(rng, offline_mt.VERBS,
                                                 a.verb))
        else:
          phrase = getattr(b, field)
          b = dataclasses.replace(b, **{field: dataclasses.replace(
              phrase, noun=_other(rng, offline_mt.NOUNS, phrase.noun))})
    rows.append((a.english(), b.english(), float(kind)))
  return rows
