"""Compare translation models trained on the same data: table and length plot.

    python -m transformer.tools.compare --workdir=workdirs/compare
    python -m transformer.tools.compare --workdir=workdirs/compare_multi30k \
        --args=path=../shared/data/multi30k,src=de,tgt=en,eval=test_2016_flickr

Trains each model of `--models` (an experiment argument `model=NAME` of
`--config`) into WORKDIR/NAME, or resumes it, or only evaluates it when
finished; then translates the evaluation split with each and writes
WORKDIR/comparison.md (BLEU, exact match, parameters, training time,
tokens/s) and WORKDIR/bleu_by_length.png (BLEU against source sentence
length, the plot of Bahdanau et al. 2015). Every run also leaves its
attention heatmaps in WORKDIR/NAME/plots. On SIGTERM the running model
checkpoints and the command exits 75: rerun it to resume. `compare(...)`
does the same from python.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import flags
import jax
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

from transformer import configs
from transformer import metrics
from transformer import storage
from transformer import train
from transformer import workdir as workdir_lib
from transformer.insight import plots
from transformer.tools import cli

DEFAULT_CONFIG = os.path.join(configs.EXPERIMENTS, 'rnn_vs_transformer.py')
DEFAULT_MODELS = ('rnn', 'rnn_attention', 'transformer', 'convs2s')
DEFAULT_EDGES = (0, 10, 20, 30, 40, 1000)

def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('workdir', None, 'Root of the runs.', required=True)
  flags.DEFINE_string('config', DEFAULT_CONFIG,
                      'Experiment file whose get_config takes model=NAME.')
  flags.DEFINE_list('models', list(DEFAULT_MODELS), 'Models to compare.')
  flags.DEFINE_string('args', '', 'More experiment arguments, e.g. '
                      'path=DIR,src=de,tgt=en.')
  flags.DEFINE_list('length_edges', [str(e) for e in DEFAULT_EDGES],
                    'Source length buckets (words): [e_i, e_i+1).')


def bleu_by_length(sources, references, hypotheses, edges):
  """[(bucket label, sentences, BLEU)] over source lengths in words."""
  lengths = np.asarray([len(s.split()) for s in sources])
  rows = []
  for low, high in zip(edges[:-1], edges[1:]):
    chosen = np.flatnonzero((lengths >= low) & (lengths < high))
    if len(chosen):
      score, _ = metrics.bleu([hypotheses[i] for i in chosen],
                              [references[i] for i in chosen])
      label = f'{low}-{high - 1}' if high < 1000 else f'{low}+'
      rows.append((label, len(chosen), score))
  return rows


def evaluate_model(experiment: str, workdir: str, edges: Sequence[int]
                   ) -> dict:
  """Trains (or resumes, or only evaluates) `experiment` ('file.py:arg')
  into `workdir`, then translates its evaluation split."""
  config = configs.load_experiment(experiment)
  result = train.train_and_evaluate(config, workdir)
  restored = workdir_lib.restore(workdir)
  pairs = restored.task.pairs(config.data.eval_split)
  sources = [s for s, _ in pairs]
  references = [t for _, t in pairs]
  with restored.active():
    hypotheses = restored.task.translate(
        restored.params, sources, beam_size=config.eval.beam_size,
        length_penalty=config.eval.length_penalty,
        max_length_offset=config.eval.max_length_offset)
  progress = workdir_lib.load_progress(workdir)
  return {
      'bleu': result['bleu'], 'exact_match': result['exact_match'],
      'params': sum(x.size for x in jax.tree.leaves(restored.params)),
      'minutes': progress.get('train_seconds', 0.0) / 60,
      'tokens_per_second': progress.get('tokens', 0.0) / max(
          progress.get('train_seconds', 0.0), 1e-9),
      'steps': restored.step,
      'by_length': bleu_by_length(sources, references, hypotheses, edges),
      'split': f'{len(sources)} {config.data.eval_split} sentences',
  }


def write_table(results: dict, path: str) -> str:
  split = next(iter(results.values()))['split']
  lines = [f'BLEU (sacreBLEU, beam search) on {split}.', '',
           '| model | BLEU | exact match | parameters | steps | training '
           'time | target tokens/s |', '|---|---|---|---|---|---|---|']
  for name, r in results.items():
    lines.append(f'| {name} | {r["bleu"]:.2f} | {r["exact_match"]:.1%} | '
                 f'{r["params"]:,} | {r["steps"]:,} | {r["minutes"]:.1f} min '
                 f'| {r["tokens_per_second"]:,.0f} |')
  buckets = [label for label, _, _ in next(iter(results.values()))['by_length']]
  lines += ['', 'BLEU by source length (words):', '',
            '| model | ' + ' | '.join(buckets) + ' |',
            '|---|' + '---|' * len(buckets)]
  for name, r in results.items():
    lines.append(f'| {name} | ' + ' | '.join(
        f'{score:.1f}' for _, _, score in r['by_length']) + ' |')
  counts = [str(n) for _, n, _ in next(iter(results.values()))['by_length']]
  lines.append('| sentences | ' + ' | '.join(counts) + ' |')
  text = '\n'.join(lines) + '\n'
  storage.write_atomically(path, text)
  return text


def plot_by_length(results: dict, path: str) -> None:
  figure = Figure(figsize=(6, 4), layout='constrained')
  FigureCanvasAgg(figure)
  axes = figure.add_subplot()
  for name, r in results.items():
    labels = [label for label, _, _ in r['by_length']]
    axes.plot(range(len(labels)), [s for _, _, s in r['by_length']], 'o-',
              label=name)
  axes.set_xticks(range(len(labels)), labels)
  axes.set_xlabel('source sentence length (words)')
  axes.set_ylabel('BLEU')
  axes.grid(alpha=0.3)
  axes.legend()
  plots.save(figure, path, dpi=120)


def compare(workdir: str, *, config: str = DEFAULT_CONFIG,
            models: Sequence[str] = DEFAULT_MODELS, args: str = '',
            length_edges: Sequence[int] = DEFAULT_EDGES) -> str:
  """Trains or evaluates each model of `models` (the experiment argument
  model=NAME of the experiment file `config`, with `args`) into
  WORKDIR/NAME; writes WORKDIR/comparison.md and bleu_by_length.png and
  returns the table."""
  results = {
      name: evaluate_model(
          f'{config}:' + ','.join(a for a in (f'model={name}', args) if a),
          storage.join(workdir, name), length_edges)
      for name in models}
  table = write_table(results, storage.join(workdir, 'comparison.md'))
  plot_by_length(results, storage.join(workdir, 'bleu_by_length.png'))
  return table


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  print(compare(args.workdir, config=args.config, models=args.models,
                args=args.args,
                length_edges=[int(e) for e in args.length_edges]))
  print(f'Written: {args.workdir}/comparison.md, '
        f'{args.workdir}/bleu_by_length.png')


def run() -> None:
  """The `transformer-compare` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
