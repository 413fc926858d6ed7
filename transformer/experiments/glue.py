r"""GLUE (Wang et al. 2018) with the BERT encoder: one task per run,
fine-tuned from a masked-language-model workdir or from scratch.

    python -m transformer.main --config=experiments/glue.py:task=entailment \
        --workdir=workdirs/glue_entailment      # offline, no files needed
    python -m transformer.main \
        --config=experiments/glue.py:task=mrpc,source=tsv,path=glue_data/MRPC,init_from=workdirs/bert_base \
        --workdir=workdirs/mrpc

Arguments: task=cola|sst2|mrpc|qqp|stsb|mnli|qnli|rte|wnli (GLUE, from
source=tsv, the official files under path=DIR: train.tsv and dev.tsv, MNLI's
dev_matched.tsv and dev_mismatched.tsv, or under glue_dir=ROOT laid out as
GLUE's download is, ROOT/RTE, ROOT/STS-B, ... (default ROOT: the data
folder's glue/, where `python -m transformer.tools.data fetch rte cola`
puts RTE and CoLA); or source=tfds, `glue/TASK`
prepared with `tfds build`) or task=entailment|paraphrase (offline pairs
generated from the grammar, the default source for them); init_from=WORKDIR
(a bert_mlm run or a converted BERT: its sizes, context and vocabulary);
epochs=N (the training steps of N epochs of the task's training split at
the experiment's batch size); runlocal. Evaluation reports the task's GLUE
metrics.

From a converted Hugging Face BERT (`python -m transformer.tools.convert`,
e.g. all-MiniLM-L6-v2) the experiment fine-tunes with the recipe measured
beside transformers in benchmarks/against_transformers.py (`CONVERTED`):
batches of 32 pairs or sentences of at most 128 tokens, AdamW, linear
decay to 0, gradients clipped at 1, the learning rate and epochs below.

Expected results for task=entailment and task=paraphrase: the registry
row docs/results/glue_entailment.json.
"""

import os

from transformer import configs
from transformer import workdir
from transformer.data import downloads
from transformer.data import glue
from transformer.data import sources
from transformer.tasks import text_classification


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/glue.py',
                            known=('task', 'source', 'path', 'glue_dir',
                                   'init_from', 'epochs', 'runlocal'))
  task = args.get('task', 'entailment')
  spec = glue.spec(task)
  offline = task in glue.OFFLINE
  source = args.get('source', 'offline' if offline else 'tsv')
  config = text_classification.default_config()
  tsv = source == 'tsv'
  config.data.update(dict(
      glue_task=task, source=source, path=_path(task, args),
      train_split='train',
      eval_split=spec.eval_split[1] if tsv else spec.eval_split[0],
      max_length=128, tokens_per_batch=4_096))
  config.train.init_from = args.get('init_from', '')
  # BERT's fine-tuning recipe (Devlin et al.): a small learning rate with
  # warmup, a few epochs; from scratch the sizes of experiments/sst2.py.
  config.model.update(dict(size='tiny', num_layers=4, d_model=128,
                           num_heads=4, dropout_rate=0.1))
  config.optimizer.update(dict(learning_rate=1e-4, warmup_steps=100))
  config.train.update(dict(num_steps=1_000, log_every=50, eval_every=250,
                           checkpoint_every=250, keep_checkpoints=2))
  if 'runlocal' in args:
    config.data.update(dict(num_train=200, num_eval=16, vocab_size=200,
                            max_length=48, tokens_per_batch=384,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2, learning_rate=1e-3))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
  if 'init_from' in args:
    pretrained = workdir.load_config(args['init_from'])
    text_classification.take_pretrained(config, pretrained)
    if pretrained.data.tokenizer == 'bert':  # a converted checkpoint
      config.data.update(CONVERTED['data'])
      if not spec.pair:
        config.data.length_multiple = (
            CONVERTED['single_sentence_length_multiple'])
      config.optimizer.update(CONVERTED['optimizer'])
      if 'epochs' not in args and 'runlocal' not in args:
        args['epochs'] = str(CONVERTED['epochs'])
  if 'epochs' in args:
    config.train.num_steps = _steps(config.data, int(args['epochs']))
    config.train.update(eval_every=config.train.num_steps,
                        checkpoint_every=config.train.num_steps)
  return config


# Fine-tuning a converted Hugging Face BERT (measured on RTE and CoLA with
# all-MiniLM-L6-v2 beside transformers: benchmarks/against_transformers.py,
# README): run_glue's batches and optimiser with the sweep's best learning
# rate and length. Batches are padded to a multiple of 32 tokens for
# sentence pairs (RTE's run from a cold start took 1.4x as long with a
# multiple of 8: 16 widths to compile) and of 8 for single sentences
# (CoLA's rows are short: 1.6x the examples per second of 32).
CONVERTED = dict(
    data=dict(max_length=128, batch_rows=32, length_multiple=32),
    single_sentence_length_multiple=8,
    optimizer=dict(schedule='linear', learning_rate=5e-5, warmup_steps=0,
                   b2=0.999, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0),
    epochs=3)


def _path(task: str, args: dict[str, str]) -> str:
  """path=, else the task's folder under glue_dir= or, by default, the
  data folder's glue/ (`python -m transformer.tools.data fetch rte`)."""
  if 'path' in args or task not in glue.FOLDERS:
    return args.get('path', '')
  root = args.get('glue_dir', os.path.join(downloads.data_dir(), 'glue'))
  return os.path.join(root, glue.FOLDERS[task])


def _steps(data, epochs: int) -> int:
  """The steps of `epochs` passes over the training split: a batch of
  data.batch_rows rows each (or, by tokens, of about tokens_per_batch /
  max_length rows at least)."""
  if epochs < 1:
    raise ValueError(f'epochs={epochs} must be >= 1.')
  count = len(sources.read('labelled_text', data, data.train_split))
  rows = data.batch_rows or max(1, data.tokens_per_batch // data.max_length)
  return epochs * -(-count // rows)
