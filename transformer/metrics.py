"""Metrics: sums normalised on the host, BLEU, and TensorBoard scalars
(written during training, read back for tables).

Steps return every metric as a (sum, count) pair; they are added up across
steps and devices and divided once on the host (`normalize`), so averages
are exact however batches and devices split the data.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import sys
import time
from typing import Any, Mapping, Sequence

from absl import logging
import jax
import numpy as np
import sacrebleu

from transformer import storage
from transformer.core import losses




def add(a: losses.Sums | None, b: losses.Sums) -> dict[str, tuple[Any, Any]]:
  """Element-wise sum of two metric dicts (a may be None)."""
  if a is None:
    return dict(b)
  return {k: (a[k][0] + b[k][0], a[k][1] + b[k][1]) for k in b}


def normalize(sums: losses.Sums) -> dict[str, float]:
  """sum / count for every metric; adds 'perplexity' = exp(nll)."""
  sums = jax.device_get(sums)
  result = {k: float(s) / max(float(n), 1e-9) for k, (s, n) in sums.items()}
  if 'nll' in result:
    result['perplexity'] = math.exp(min(result['nll'], 100.0))
  return result


def matthews(predictions: np.ndarray, labels: np.ndarray) -> float:
  """Matthews correlation (CoLA's metric), multiclass as Gorodkin 2004 and
  scikit-learn define it; 0 where a class count leaves it undefined."""
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  classes = np.union1d(predictions, labels)
  predicted = np.array([(predictions == k).sum() for k in classes], float)
  true = np.array([(labels == k).sum() for k in classes], float)
  total, correct = float(len(labels)), float((predictions == labels).sum())
  denominator = math.sqrt((total ** 2 - predicted @ predicted)
                          * (total ** 2 - true @ true))
  return (correct * total - predicted @ true) / denominator if denominator \
      else 0.0


def f1(predictions: np.ndarray, labels: np.ndarray) -> float:
  """F1 of the positive class 1 (MRPC's and QQP's), 0 without positives."""
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  tp = float(((predictions == 1) & (labels == 1)).sum())
  wrong = float((predictions != labels).sum())
  return 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
  """Ranks from 1, ties given their average rank (scipy's 'average')."""
  order = np.argsort(x, kind='stable')
  ranks = np.empty(len(x))
  ranks[order] = np.arange(1, len(x) + 1)
  values, inverse = np.unique(x, return_inverse=True)
  sums = np.bincount(inverse, weights=ranks, minlength=len(values))
  return (sums / np.bincount(inverse, minlength=len(values)))[inverse]


def pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
  return float(np.corrcoef(np.asarray(predictions, float),
                           np.asarray(labels, float))[0, 1])


def spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
  """Pearson correlation of the ranks (STS-B's second metric)."""
  return pearson(_ranks(np.asarray(predictions, float)),
                 _ranks(np.asarray(labels, float)))


# GLUE's metrics by name: (predictions, labels) -> score in [-1, 1].
SCORES = {'accuracy': lambda p, y: float(np.mean(np.asarray(p) ==
                                                 np.asarray(y))),
          'matthews': matthews, 'f1': f1, 'pearson': pearson,
          'spearman': spearman}


def bleu(hypotheses: Sequence[str], references: Sequence[str],
         tokenize: str = '13a') -> tuple[float, str]:
  """Corpus BLEU of detokenised hypotheses against raw references.

  Returns:
    The score and sacreBLEU's signature string (print it with the score).
  """
  metric = sacrebleu.BLEU(tokenize=tokenize)
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return score.score, str(metric.get_signature())


def multi_reference_bleu(hypotheses: Sequence[str],
                         references: Sequence[Sequence[str]],
                         orders: Sequence[int] = (1, 2, 3, 4),
                         tokenize: str = '13a') -> dict[str, float]:
  """BLEU-n for each order n against every reference of each hypothesis
  (any number per hypothesis), as captioning papers report it."""
  most = max(len(r) for r in references)
  # sacreBLEU takes reference streams; None marks a missing reference.
  streams = [[r[k] if k < len(r) else None for r in references]
             for k in range(most)]
  return {f'bleu{n}': sacrebleu.BLEU(max_ngram_order=n, tokenize=tokenize)
          .corpus_score(list(hypotheses), streams).score for n in orders}


def _summary_writer_class() -> type:
  """tensorboardX's SummaryWriter, imported without torch: tensorboardX
  imports torch wherever it is installed (3 s of every start on a CPU)
  only to accept its tensors, and scalars need none of it."""
  hidden = 'torch' not in sys.modules
  if hidden:
    sys.modules['torch'] = None  # `import torch` raises ImportError
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  finally:
    if hidden:
      del sys.modules['torch']
  return SummaryWriter


class MetricWriter:
  """TensorBoard event files via tensorboardX (no TensorFlow import).

  Only process 0 writes, so multi-host runs produce one set of events. For
  a workdir on cloud storage the events are written to its local mirror
  and copied up at most once a minute and when the writer closes.
  """

  UPLOAD_SECONDS = 60
  # tensorboardX names an event file by the second and the host and opens
  # it for writing anew: a second writer of the same second (a run resumed
  # at once, two writers of one process) would empty the first's file. A
  # suffix of the process and a count keeps every writer's file its own.
  _numbers = itertools.count()

  def __init__(self, logdir: str):
    self._writer, self._logdir, self._uploaded = None, logdir, 0.0
    if jax.process_index() == 0:
      local = storage.local_mirror(logdir)
      os.makedirs(local, exist_ok=True)
      self._writer = _summary_writer_class()(
          logdir=local,
          filename_suffix=f'.{os.getpid()}.{next(self._numbers)}')

  def _upload(self, force: bool = False) -> None:
    now = time.time()
    if storage.is_remote(self._logdir) and (
        force or now - self._uploaded > self.UPLOAD_SECONDS):
      storage.upload(self._writer.logdir, self._logdir, prefix='events.')
      self._uploaded = now

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    if self._writer is None:
      return
    for name, value in scalars.items():
      if np.isfinite(value):
        self._writer.add_scalar(name, value, global_step=step)
    self._writer.flush()
    self._upload()

  def write_text(self, step: int, name: str, text: str) -> None:
    if self._writer is not None:
      self._writer.add_text(name, text, global_step=step)

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._upload(force=True)
      logging.info('Metrics written to %s', self._logdir)


def read_scalars(workdir: str) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of every TensorBoard event file in `workdir`,
  oldest file first, so a rerun's values win (`read_events`; a last record
  cut short, as a run still writing leaves it, is left out)."""
  return read_events(workdir).scalars


class DamagedEventFile(ValueError):
  """An event file record whose checksum fails, or that is no event: one
  line naming the file, the record's byte offset and what to do."""


@dataclasses.dataclass(frozen=True)
class Events:
  """A workdir's scalars ({tag: {step: value}}), and a line for each event
  file whose last record is cut short (a run stopped while writing it, or
  still writing): the records before it are read."""
  scalars: dict[str, dict[int, float]]
  cut_short: list[str]


def read_events(workdir: str) -> Events:
  """The scalars of every TensorBoard event file in `workdir`, oldest file
  first, so a rerun's values win. Each record's length and data are
  checked against their CRCs: a damaged record raises DamagedEventFile; a
  last record cut short is left out, with a line in `cut_short`."""
  from google.protobuf import message  # pylint: disable=g-import-not-at-top
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  scalars: dict[str, dict[int, float]] = {}
  cut_short = []
  folder = storage.path(workdir)
  names = sorted((n for n in storage.listdir(workdir)
                  if n.startswith('events.out.tfevents')),
                 key=lambda n: (folder / n).stat().mtime)
  for name in names:
    path = str(folder / name)
    records, cut = _records((folder / name).read_bytes(), path, workdir)
    if cut is not None:
      cut_short.append(f'{path}: its last record (byte {cut}) is cut short, '
                       f'as a run stopped while writing leaves it; the '
                       f'{len(records)} record(s) before it are read.')
    for before, (offset, data) in enumerate(records):
      try:
        event = event_pb2.Event.FromString(data)
      except message.DecodeError as e:  # whole, and still no event
        raise _damaged(path, workdir, offset, before, 'not an event') from e
      for value in event.summary.value:
        scalars.setdefault(value.tag, {})[event.step] = value.simple_value
  return Events(scalars, cut_short)


# An event file is a TFRecord file: each record a little-endian uint64
# length, the masked CRC-32C of those 8 bytes, the data, and the masked
# CRC-32C of the data.
_HEADER, _FOOTER = 12, 4


def _records(data: bytes, path: str, workdir: str
             ) -> tuple[list[tuple[int, bytes]], int | None]:
  """[(byte offset, data), ...] of the file's records, and the offset of
  a last record cut short (None where the file ends with a whole one)."""
  records, offset = [], 0
  while offset < len(data):
    if len(data) - offset < _HEADER:
      return records, offset
    length = data[offset:offset + 8]
    if _masked_crc32c(length) != _uint32(data, offset + 8):
      # A crash can leave zeros where a file system had allocated the
      # blocks of a record not yet written.
      if not data[offset:].strip(b'\0'):
        return records, offset
      raise _damaged(path, workdir, offset, len(records),
                     'its length fails its checksum')
    end = offset + _HEADER + int.from_bytes(length, 'little')
    if end + _FOOTER > len(data):
      return records, offset
    if _masked_crc32c(data[offset + _HEADER:end]) != _uint32(data, end):
      raise _damaged(path, workdir, offset, len(records),
                     'its data fails its checksum')
    records.append((offset, data[offset + _HEADER:end]))
    offset = end + _FOOTER
  return records, None


def _damaged(path: str, workdir: str, offset: int, before: int,
             why: str) -> DamagedEventFile:
  return DamagedEventFile(
      f'{path}: the event record at byte {offset} is damaged ({why}); keep '
      f'the {before} record(s) before it (truncate -s {offset} {path}), or '
      f'move the file out of {workdir} to read the run without it.')


def _uint32(data: bytes, offset: int) -> int:
  return int.from_bytes(data[offset:offset + 4], 'little')


def _masked_crc32c(data: bytes) -> int:
  """TFRecord's masked CRC-32C (a CRC of data holding CRCs is masked)."""
  crc = _crc32c()(data)
  return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


@functools.cache
def _crc32c():
  """CRC-32C: google-crc32c's (C, under gcsfs's Google Cloud client), else
  tensorboardX's own (Python, a few MB a second)."""
  try:
    import google_crc32c  # pylint: disable=g-import-not-at-top
  except ImportError:
    from tensorboardX import crc32c  # pylint: disable=g-import-not-at-top
    return crc32c.crc32c
  return google_crc32c.value
