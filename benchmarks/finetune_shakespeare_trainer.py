r"""benchmarks/finetune_shakespeare.py's fine-tuning, done by transformers'
`Trainer` on the same data: the row to set beside ours.

    python benchmarks/finetune_shakespeare_trainer.py --family=llama \
        --text=../shared/data/tinyshakespeare/input.txt --out=/tmp/ft

(`pip install accelerate`, which `Trainer` needs, as well as the interop
extra.) The same flags and `--out` as finetune_shakespeare.py, whose
published directory it trains (made and converted first if missing). The
data are our task's training and validation chunks of the text (the
converted workdir's tokenizer, chunks of the context, the last 10% held
out), mapped back to the published ids; the recipe is lm_finetune.py's
(AdamW 0.9/0.95, weight decay 0.1, constant 3e-5, clipping at 1, the
model's own dropout, rows in a random order); the loss is ours, every
target of a chunk. Before the first step both sides' validation losses
are equal. The wall time counts loading the model, both evaluations and
the training.
"""

import math
import os
import time

from absl import app

import finetune_shakespeare as ours  # benchmarks/, this script's folder

FLAGS = ours.flags.FLAGS


def _finetune_config(converted: str):
  from transformer.experiments import lm_finetune  # pylint: disable=g-import-not-at-top
  config = lm_finetune.get_config(
      f'init_from={converted},path={FLAGS.text},steps={FLAGS.steps}')
  config.data.tokens_per_batch = FLAGS.rows * FLAGS.length
  return config


def _chunks(config) -> tuple[list, list, int]:
  """Our task's training and validation (inputs, targets) chunks in the
  published ids, and the validation text's bytes."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  # A folder per family: the task keeps the vocabulary files it finds there.
  task = tasks.build(config, os.path.join(FLAGS.out,
                                          f'trainer_chunks_{FLAGS.family}'))
  order = task.tokenizer.ids

  def published(split):
    return [(order.to_published(x), order.to_published(y))
            for x, y in task.examples(split)]

  validation = ''.join(task.documents(config.data.eval_split))
  return (published(config.data.train_split),
          published(config.data.eval_split), len(validation.encode()))


def _collate(pairs):
  import torch  # pylint: disable=g-import-not-at-top
  width = max(len(x) for x, _ in pairs)
  inputs = torch.zeros((len(pairs), width), dtype=torch.long)
  labels = torch.full((len(pairs), width), -100, dtype=torch.long)
  for row, (x, y) in enumerate(pairs):
    inputs[row, :len(x)] = torch.as_tensor(x)
    labels[row, :len(y)] = torch.as_tensor(y)
  return {'input_ids': inputs, 'labels': labels}


def _token_losses(model, batch):
  """Nats of every target, as our loss counts them (no shift: the targets
  are the inputs' next tokens already)."""
  import torch  # pylint: disable=g-import-not-at-top
  logits = model(input_ids=batch['input_ids']).logits
  return torch.nn.functional.cross_entropy(
      logits.flatten(0, 1), batch['labels'].flatten(), ignore_index=-100,
      reduction='none')


def _evaluate(model, chunks, rows: int, text_bytes: int):
  """Validation nats per token and bits per byte."""
  import torch  # pylint: disable=g-import-not-at-top
  model.eval()
  nats, count = 0.0, 0
  with torch.no_grad():
    for begin in range(0, len(chunks), rows):
      batch = _collate(chunks[begin:begin + rows])
      nats += float(_token_losses(model, batch).sum())
      count += int((batch['labels'] != -100).sum())
  return nats / count, nats / math.log(2) / text_bytes


def main(argv):
  del argv
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  published = os.path.join(FLAGS.out, f'published_{FLAGS.family}')
  converted = os.path.join(FLAGS.out, f'converted_{FLAGS.family}')
  if not os.path.exists(converted):
    with open(FLAGS.text, encoding='utf-8') as f:
      text = f.read()
    ours._publish(published, text[:int(len(text) * 0.9)].splitlines())  # pylint: disable=protected-access
    ours._run('transformer.tools.convert', '--from=hf',  # pylint: disable=protected-access
              f'--input={published}', f'--output={converted}')
  config = _finetune_config(converted)
  train, validation, text_bytes = _chunks(config)
  start = time.perf_counter()
  model = transformers.AutoModelForCausalLM.from_pretrained(
      published, dtype=torch.float32)

  class SameLoss(transformers.Trainer):

    def compute_loss(self, model, inputs, return_outputs=False,
                     num_items_in_batch=None):
      del return_outputs, num_items_in_batch
      return (_token_losses(model, inputs).sum()
              / (inputs['labels'] != -100).sum())

  opt, rows = config.optimizer, config.data.eval_rows
  before = _evaluate(model, validation, rows, text_bytes)
  SameLoss(
      model=model, train_dataset=train, data_collator=_collate,
      args=transformers.TrainingArguments(
          output_dir=os.path.join(FLAGS.out, f'trainer_{FLAGS.family}'),
          max_steps=FLAGS.steps, per_device_train_batch_size=FLAGS.rows,
          learning_rate=opt.learning_rate, lr_scheduler_type='constant',
          warmup_steps=0, adam_beta1=opt.b1, adam_beta2=opt.b2,
          weight_decay=opt.weight_decay, max_grad_norm=opt.grad_clip_norm,
          save_strategy='no', report_to=[], use_cpu=True, seed=0,
          logging_steps=max(1, FLAGS.steps // 10), disable_tqdm=True,
          remove_unused_columns=False)).train()
  after = _evaluate(model, validation, rows, text_bytes)
  seconds = time.perf_counter() - start
  tokens = FLAGS.steps * FLAGS.rows * FLAGS.length
  print(f'{FLAGS.family}, {FLAGS.layers} blocks x {FLAGS.width}, '
        f'{FLAGS.vocab:,} pieces; {FLAGS.steps} steps of {FLAGS.rows} x '
        f'{FLAGS.length} tokens; {os.cpu_count()} cores; transformers '
        f'{transformers.__version__}, torch {torch.__version__}')
  print('| fine-tuning | validation loss, step 0 -> last | bits per byte | '
        'wall time (load and 2 evaluations in) | tokens/s |')
  print('|---|---|---|---|---|')
  print(f'| {FLAGS.family}_full, Trainer | {before[0]:.4f} -> '
        f'{after[0]:.4f} | {before[1]:.4f} -> {after[1]:.4f} | '
        f'{seconds / 60:.1f} min | {tokens / seconds:,.0f} |')


if __name__ == '__main__':
  app.run(main)
