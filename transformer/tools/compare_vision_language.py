"""Compare vision-and-language models on generated scenes: table and plot.

    python -m transformer.tools.compare_vision_language \
        --workdir=workdirs/vl_compare
    python -m transformer.tools.compare_vision_language \
        --workdir=workdirs/vl_compare --pretrain_steps=1500 --vqa_steps=1000

For each architecture of `--architectures` (ViLBERT's two streams with
co-attention, and a single-stream model with words and regions in one
BERT, VisualBERT-style), pretrains it (`experiments/vilbert_offline.py`)
into WORKDIR/ARCH, then fine-tunes visual question answering
(`vilbert_vqa.py`) and referring expressions (`vilbert_refer.py`) both
from that pretraining (WORKDIR/ARCH_vqa, ARCH_refer) and from scratch
(ARCH_vqa_scratch, ARCH_refer_scratch); and trains the question-only VQA
model (WORKDIR/question_only). A finished run is only evaluated, an
interrupted one resumes: rerun the command after SIGTERM (exit 75).

Writes WORKDIR/comparison.md (VQA accuracy per question type, caption-image
retrieval recall at 1/5/10 both ways from the pretraining, referring
accuracy, parameters, training time) and WORKDIR/comparison.png.
`compare(...)` does the same from python.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from absl import flags
import jax
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

from transformer import configs
from transformer import storage
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data.generated import scenes
from transformer.insight import plots
from transformer.models import vilbert
from transformer.tools import cli

EXPERIMENTS = configs.EXPERIMENTS
ARCHITECTURE_NAMES = {'two_stream': 'two-stream (ViLBERT)',
                      'single_stream': 'single-stream (VisualBERT-style)'}


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('workdir', None, 'Root of the runs.', required=True)
  flags.DEFINE_list('architectures', list(vilbert.ARCHITECTURES),
                    'Architectures to compare.')
  flags.DEFINE_string('args', '', "Experiment arguments of every run, e.g. "
                      "'runlocal'.")
  flags.DEFINE_integer('pretrain_steps', 0, 'Pretraining steps (0: the '
                       "experiment's).")
  flags.DEFINE_integer('vqa_steps', 0, "VQA steps (0: the experiment's).")
  flags.DEFINE_integer('refer_steps', 0, 'Referring-expression steps (0: '
                       "the experiment's).")


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run of the comparison."""
  name: str  # its folder under the comparison's workdir
  experiment: str  # 'vilbert_vqa.py:blind'
  architecture: str
  steps: int  # 0: the experiment's
  init_from: str = ''  # the name of the run it starts from


def plan(architectures: Sequence[str], *, pretrain_steps: int = 0,
         vqa_steps: int = 0, refer_steps: int = 0) -> list[Run]:
  """The runs in the order they train (a pretraining before its users)."""
  for architecture in architectures:
    if architecture not in vilbert.ARCHITECTURES:
      raise ValueError(f'Architecture {architecture!r}; choose among '
                       f'{vilbert.ARCHITECTURES}.')
  runs = []
  for a in architectures:
    runs.append(Run(a, 'vilbert_offline.py', a, pretrain_steps))
    for task, steps in (('vqa', vqa_steps), ('refer', refer_steps)):
      runs.append(Run(f'{a}_{task}', f'vilbert_{task}.py', a, steps, a))
      runs.append(Run(f'{a}_{task}_scratch', f'vilbert_{task}.py', a, steps))
  # Without regions both architectures are the same BERT.
  runs.append(Run('question_only', 'vilbert_vqa.py:blind',
                  architectures[0], vqa_steps))
  return runs


def train_run(run: Run, root: str, args: str) -> dict:
  """Trains (or resumes, or only evaluates) `run`; its final metrics with
  'params', 'minutes' and 'steps'."""
  file, _, own = run.experiment.partition(':')
  arg = ','.join(a for a in (own, args) if a)
  config = configs.load_experiment(os.path.join(EXPERIMENTS, file) +
                                   (f':{arg}' if arg else ''))
  config.model.architecture = run.architecture
  if run.steps:
    config.train.num_steps = run.steps
  if run.init_from:
    config.train.init_from = os.path.join(root, run.init_from)
  workdir = os.path.join(root, run.name)
  print(f'== {run.name}: {run.experiment}, {run.architecture}'
        + (f', from {run.init_from}' if run.init_from else ''), flush=True)
  result = dict(train.train_and_evaluate(config, workdir))
  restored = workdir_lib.restore(workdir)
  progress = workdir_lib.load_progress(workdir)
  result.update(params=sum(x.size for x in jax.tree.leaves(restored.params)),
                minutes=progress.get('train_seconds', 0.0) / 60,
                steps=restored.step)
  return result


def rows(results: dict, architectures: Sequence[str]) -> list[dict]:
  """One row per model: VQA and referring results, retrieval where the
  model was pretrained, total training time of the runs it took."""
  table = []
  for a in architectures:
    for pretrained in (True, False):
      suffix = '' if pretrained else '_scratch'
      vqa, refer = results[f'{a}_vqa{suffix}'], results[f'{a}_refer{suffix}']
      runs = [vqa, refer] + ([results[a]] if pretrained else [])
      table.append(dict(
          model=ARCHITECTURE_NAMES[a], pretrained=pretrained, vqa=vqa,
          refer=refer['accuracy'], params=vqa['params'],
          retrieval=results[a] if pretrained else None,
          minutes=sum(r['minutes'] for r in runs)))
  blind = results['question_only']
  table.append(dict(model='question only (no image)', pretrained=False,
                    vqa=blind, refer=None, params=blind['params'],
                    retrieval=None, minutes=blind['minutes']))
  return table


def write_table(table: list[dict], results: dict, path: str) -> str:
  kinds = scenes.QUESTION_TYPES
  percent = lambda x: '-' if x is None else f'{100 * x:.1f}'
  lines = [
      'VQA accuracy (%) per question type, referring-expression accuracy '
      '(top proposal with IoU >= 0.5) and caption-image retrieval among '
      'the test images (recall at 1/5/10, %, caption -> image and image -> '
      'caption; from the pretraining).', '',
      '| model | pretrained | VQA | ' + ' | '.join(kinds) +
      ' | referring | retrieval c->i | retrieval i->c | parameters (VQA) '
      '| training time |',
      '|---|---|---|' + '---|' * len(kinds) + '---|---|---|---|---|']
  for row in table:
    retrieval = row['retrieval']
    recall = ['-', '-'] if retrieval is None else [
        ' / '.join(percent(retrieval[f'{way}_retrieval_r{k}'])
                   for k in (1, 5, 10)) for way in ('image', 'caption')]
    lines.append(
        f'| {row["model"]} | {"yes" if row["pretrained"] else "no"} | '
        f'{percent(row["vqa"]["accuracy"])} | ' + ' | '.join(
            percent(row['vqa'].get(f'accuracy_{k}')) for k in kinds) +
        f' | {percent(row["refer"])} | {recall[0]} | {recall[1]} | '
        f'{row["params"]:,} | {row["minutes"]:.1f} min |')
  lines += ['', '| run | steps | minutes |', '|---|---|---|']
  lines += [f'| {name} | {r["steps"]:,} | {r["minutes"]:.1f} |'
            for name, r in results.items()]
  text = '\n'.join(lines) + '\n'
  storage.write_atomically(path, text)
  return text


def plot(table: list[dict], path: str) -> None:
  """VQA accuracy per question type (and overall) and referring accuracy,
  one bar per model."""
  kinds = ('all',) + scenes.QUESTION_TYPES
  figure = Figure(figsize=(10, 4), layout='constrained')
  FigureCanvasAgg(figure)
  vqa, refer = figure.subplots(1, 2, width_ratios=(3, 1))
  width = 0.8 / len(table)
  labels = [f'{r["model"]}{", pretrained" if r["pretrained"] else ""}'
            for r in table]
  for i, (row, label) in enumerate(zip(table, labels)):
    values = [row['vqa']['accuracy']] + [
        row['vqa'].get(f'accuracy_{k}', np.nan) for k in scenes.QUESTION_TYPES]
    vqa.bar(np.arange(len(kinds)) + (i - (len(table) - 1) / 2) * width,
            100 * np.asarray(values), width, label=label)
    if row['refer'] is not None:
      refer.bar(i, 100 * row['refer'], 0.8, color=f'C{i}')
  vqa.set_xticks(range(len(kinds)), kinds)
  vqa.set_ylabel('VQA accuracy (%)')
  vqa.set_ylim(0, 100)
  vqa.legend(fontsize=7)
  refer.set_xticks([])
  refer.set_ylabel('referring accuracy (%)')
  refer.set_ylim(0, 100)
  for axes in (vqa, refer):
    axes.grid(axis='y', alpha=0.3)
  plots.save(figure, path, dpi=120)


def compare(workdir: str, *,
            architectures: Sequence[str] = vilbert.ARCHITECTURES,
            args: str = '', pretrain_steps: int = 0, vqa_steps: int = 0,
            refer_steps: int = 0) -> str:
  """Trains or evaluates every run of `plan(...)` under `workdir`; writes
  WORKDIR/comparison.md and comparison.png and returns the table."""
  results = {run.name: train_run(run, workdir, args)
             for run in plan(architectures, pretrain_steps=pretrain_steps,
                             vqa_steps=vqa_steps, refer_steps=refer_steps)}
  table = rows(results, architectures)
  text = write_table(table, results, storage.join(workdir, 'comparison.md'))
  plot(table, storage.join(workdir, 'comparison.png'))
  return text


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  print(compare(args.workdir, architectures=args.architectures,
                args=args.args, pretrain_steps=args.pretrain_steps,
                vqa_steps=args.vqa_steps, refer_steps=args.refer_steps))
  print(f'Written: {args.workdir}/comparison.md, '
        f'{args.workdir}/comparison.png')


def run() -> None:
  """The `transformer-compare-vision-language` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
