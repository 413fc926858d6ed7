"""The text input pipeline at scale: token cache build, start to first batch,
packed tokens per second on one core, peak host memory.

    python benchmarks/input_pipeline.py                  # 5M pairs, 1 GB text
    python benchmarks/input_pipeline.py --pairs=20000 --text_mb=5   # quick

Two corpora, written into a new folder of the run's own (made under
`--folder`, or the system's temporary folder; removed afterwards unless
`--keep`):
- `pairs`: `--pairs` English-Spanish sentence pairs of the offline grammar
  (`offline_mt.sample_pair`), as translation examples (both sides end with
  EOS; pairs longer than `--max_length` tokens dropped and counted);
- `text`: a `--text_mb` MB text file of documents (one per line) made of
  the grammar's sentences (a pool of 200,000 sampled sentences drawn at
  random with numpy, since sampling a gigabyte sentence by sentence takes a
  quarter of an hour), as language-model examples (`text.lm_examples`,
  chunks of at most `--max_length`).
Each is tokenised by a SentencePiece model of `--vocab_size` pieces trained
on its first 200,000 lines (the tokenizer's training is not what is
measured), and the cache is built the way the tasks build it:
`token_cache.load_or_build` over chunks of 50,000 examples.

Then a fresh process pinned to one core (`sched_setaffinity`) does what a
restarting run does: opens the cache (checksums verified), builds
`packing.PackedTrainBatches` (`--tokens_per_batch` per side, rows of
`--max_length`) and takes the first batch; then `--batches` more, counting
non-padding target tokens per second; then a second iterator resumes at
step `--resume_step` and takes its first batch. Reported: the build time,
the time from that process's start to its first batch (and from opening
the cache), the resume time, packed target tokens/s on the one core, the
process's peak resident memory (VmHWM) beside the cache's size on disk,
what it held after its imports (jax, numpy), before opening the cache, and
how much of the memory-mapped cache was resident at the end (mapped pages
count in the resident memory: shuffled reads touch most of the cache's
pages, which stay in the kernel's page cache, shared and evictable). The
first iterator is dropped before the resume, as a restarting run holds
one.

Targets (issue 19): at least 1M target tokens/s from the cache on one core,
start to first batch under 10 s, peak memory under 1.5x the cache size.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from transformer.data import packing
from transformer.data import text
from transformer.data import token_cache
from transformer.data import tokenization
from transformer.data.generated import offline_mt

_PAIRS = flags.DEFINE_integer('pairs', 5_000_000, 'Sentence pairs.')
_TEXT_MB = flags.DEFINE_integer('text_mb', 1024, 'Text file size in MB.')
_PARTS = flags.DEFINE_list('parts', ['pairs', 'text'], 'Corpora to run.')
_MAX_LENGTH = flags.DEFINE_integer('max_length', 256, 'Row length.')
_TOKENS = flags.DEFINE_integer('tokens_per_batch', 25_000,
                               'Token slots per batch and side.')
_VOCAB = flags.DEFINE_integer('vocab_size', 32_000, 'SentencePiece pieces.')
_BATCHES = flags.DEFINE_integer('batches', 200, 'Batches timed.')
_RESUME = flags.DEFINE_integer('resume_step', 10_000, 'Step resumed at.')
_FOLDER = flags.DEFINE_string('folder', None, 'Where the run\'s own '
                              'working folder is made (default: the system '
                              'temporary folder).')
_KEEP = flags.DEFINE_bool('keep', False, 'Keep the working folder.')
_MEASURE = flags.DEFINE_string('measure', None, 'Internal: a JSON job for '
                               'the one-core measuring process.')

CHUNK = 50_000
TRAIN_LINES = 200_000


def write_pairs(folder: str, count: int) -> tuple[str, str]:
  rng = random.Random(0)
  paths = [os.path.join(folder, f'pairs.{lang}') for lang in ('en', 'es')]
  with open(paths[0], 'w') as en, open(paths[1], 'w') as es:
    for _ in range(count):
      source, target = offline_mt.sample_pair(rng)
      en.write(source + '\n')
      es.write(target + '\n')
  return tuple(paths)


def write_text(folder: str, megabytes: int) -> str:
  rng = random.Random(1)
  pool = np.array([offline_mt.sample_pair(rng)[0].capitalize() + '.'
                   for _ in range(TRAIN_LINES)], dtype=object)
  draw = np.random.default_rng(1)
  path = os.path.join(folder, 'text.txt')
  with open(path, 'w') as f:
    while f.tell() < megabytes * 1e6:
      sizes = draw.integers(1, 30, 10_000)  # sentences per document
      picks = pool[draw.integers(0, len(pool), sizes.sum())]
      f.write('\n'.join(' '.join(doc) for doc in np.split(
          picks, np.cumsum(sizes)[:-1])) + '\n')
  return path


def lines(path: str):
  with open(path) as f:
    for line in f:
      yield line.rstrip('\n')


def batched(iterable, size: int):
  batch = []
  for item in iterable:
    batch.append(item)
    if len(batch) == size:
      yield batch
      batch = []
  if batch:
    yield batch


def tokenizer_for(folder: str, name: str, sources: list[str]):
  path = os.path.join(folder, f'{name}.spm.model')
  tokenization.load_or_train(path, lambda: iter(sources), _VOCAB.value)
  return tokenization.SentencePieceTokenizer(path)


def build(folder: str, part: str) -> dict:
  """Writes the corpus, trains its tokenizer, builds its cache; returns the
  job for the measuring process."""
  start = time.perf_counter()
  if part == 'pairs':
    paths = write_pairs(folder, _PAIRS.value)
    sample = [line for path in paths for line in
              (l for _, l in zip(range(TRAIN_LINES // 2), lines(path)))]
  else:
    paths = (write_text(folder, _TEXT_MB.value),)
    sample = [l for _, l in zip(range(TRAIN_LINES), lines(paths[0]))]
  generated = time.perf_counter() - start
  tokenizer = tokenizer_for(folder, part, sample)
  max_length, dropped = _MAX_LENGTH.value, [0]

  def chunks():
    if part == 'pairs':
      for chunk in batched(zip(*(lines(p) for p in paths)), CHUNK):
        ids = [tokenizer.encode_batch([pair[side] for pair in chunk])
               for side in (0, 1)]
        examples = [(np.asarray(s, np.int32), np.asarray(t, np.int32))
                    for s, t in zip(*ids)]
        kept = [e for e in examples
                if len(e[0]) <= max_length and len(e[1]) <= max_length]
        dropped[0] += len(examples) - len(kept)
        yield kept
    else:
      for chunk in batched(lines(paths[0]), CHUNK):
        yield text.lm_examples(tokenizer.encode_batch(chunk, add_eos=False),
                               max_length)

  key = {'part': part, 'size': [token_cache.file_stamp(p) for p in paths]}
  start = time.perf_counter()
  _, _, meta = token_cache.load_or_build(
      os.path.join(folder, 'cache'), part, key, chunks,
      vocab_size=tokenizer.vocab_size, notes=lambda: {'dropped': dropped[0]})
  built = time.perf_counter() - start
  cache = os.path.join(folder, 'cache', f'{part}-{token_cache.digest(key)}')
  return {'part': part, 'root': os.path.join(folder, 'cache'), 'key': key,
          'generated_s': generated, 'build_s': built,
          'examples': meta['examples'], 'dropped': meta['notes']['dropped'],
          'corpus_mb': sum(os.path.getsize(p) for p in paths) / 1e6,
          'cache_mb': sum(os.path.getsize(os.path.join(cache, f))
                          for f in os.listdir(cache)) / 1e6}


def memory_mb(field: str = 'VmHWM') -> float:
  """A memory figure of this process from /proc/self/status: VmHWM, the peak
  resident memory (unlike ru_maxrss, not inherited across fork and exec from
  a large parent), or RssFile, the resident pages of mapped files (shared
  libraries, the memory-mapped cache)."""
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(f'{field}:'):
        return int(line.split()[1]) / 1e3
  raise OSError(f'No {field} in /proc/self/status (Linux only).')


def measure(job: dict) -> dict:
  """In the fresh one-core process: open, first batch, rate, resume."""
  def refuse():
    raise RuntimeError('The cache should exist: nothing is tokenised here.')
  imported, files_imported = memory_mb(), memory_mb('RssFile')
  opened = time.perf_counter()
  source, target, _ = token_cache.load_or_build(
      job['root'], job['part'], job['key'], refuse, vocab_size=1 << 16)
  make = lambda step: packing.PackedTrainBatches(
      (source, target), max_length=_MAX_LENGTH.value,
      tokens_per_batch=_TOKENS.value, seed=0, start_step=step)
  batches = make(0)
  next(batches)
  first, since_launch = time.perf_counter(), time.time() - job['launched']
  tokens, start = 0, time.perf_counter()
  for _ in range(_BATCHES.value):
    tokens += int((next(batches)['targets'] > 0).sum())
  rate = tokens / (time.perf_counter() - start)
  del batches  # a restarting run holds one iterator, the resumed one
  start = time.perf_counter()
  next(make(_RESUME.value))
  resumed = time.perf_counter() - start
  return {'open_to_first_s': first - opened, 'resume_s': resumed,
          'start_to_first_s': since_launch,
          'tokens_per_s': rate, 'import_rss_mb': imported,
          'mapped_cache_mb': memory_mb('RssFile') - files_imported,
          'peak_rss_mb': memory_mb()}


def main(argv):
  del argv
  if _MEASURE.value:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(json.dumps(measure(json.loads(_MEASURE.value))))
    return
  if _FOLDER.value:
    os.makedirs(_FOLDER.value, exist_ok=True)
  # Always a new folder of its own (under --folder if given): only what
  # this run wrote is removed.
  folder = tempfile.mkdtemp(prefix='input_pipeline-', dir=_FOLDER.value)
  rows = []
  try:
    for part in _PARTS.value:
      job = build(folder, part)
      env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1',
                 MKL_NUM_THREADS='1')
      start = time.perf_counter()
      job['launched'] = time.time()
      out = subprocess.run(
          [sys.executable, __file__, f'--measure={json.dumps(job)}',
           f'--max_length={_MAX_LENGTH.value}',
           f'--tokens_per_batch={_TOKENS.value}',
           f'--batches={_BATCHES.value}',
           f'--resume_step={_RESUME.value}'],
          env=env, capture_output=True, text=True, check=True)
      result = json.loads(out.stdout.strip().splitlines()[-1])
      rows.append({**job, **result, 'process_s': time.perf_counter() - start})
  finally:
    if not _KEEP.value:
      shutil.rmtree(folder, ignore_errors=True)
  header = (f'{"corpus":>8} {"examples":>11} {"corpus MB":>10} '
            f'{"cache MB":>9} {"build s":>8} {"start to 1st s":>15} '
            f'{"open to 1st s":>14} '
            f'{"resume s":>9} {"tokens/s 1 core":>16} {"peak RSS MB":>12} '
            f'{"RSS/cache":>10} {"(RSS-imports)/cache":>20} '
            f'{"cache mapped MB":>16}')
  print(f'rows of {_MAX_LENGTH.value} tokens, {_TOKENS.value:,} target token '
        f'slots per batch, SentencePiece {_VOCAB.value:,}; resume at step '
        f'{_RESUME.value:,}')
  print(header)
  print('-' * len(header))
  for r in rows:
    print(f'{r["part"]:>8} {r["examples"]:>11,} {r["corpus_mb"]:>10,.0f} '
          f'{r["cache_mb"]:>9,.0f} {r["build_s"]:>8,.1f} '
          f'{r["start_to_first_s"]:>15.2f} '
          f'{r["open_to_first_s"]:>14.2f} {r["resume_s"]:>9.2f} '
          f'{r["tokens_per_s"]:>16,.0f} {r["peak_rss_mb"]:>12,.0f} '
          f'{r["peak_rss_mb"] / r["cache_mb"]:>10.2f} '
          f'{(r["peak_rss_mb"] - r["import_rss_mb"]) / r["cache_mb"]:>20.2f} '
          f'{r["mapped_cache_mb"]:>16,.0f}')
  for r in rows:
    print(f'{r["part"]}: generated in {r["generated_s"]:.0f} s; '
          f'{r["import_rss_mb"]:,.0f} MB resident after the imports (jax, '
          f'numpy), before the cache is opened; '
          f'{r["dropped"]:,} examples over max_length dropped; measuring '
          f'process {r["process_s"]:.1f} s in all (start, open, first batch, '
          f'{_BATCHES.value} batches, resume)')


if __name__ == '__main__':
  app.run(main)
