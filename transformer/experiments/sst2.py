r"""Sentence classification (SST-2 sentiment) with the BERT encoder,
fine-tuned from a masked-language-model workdir.

    python -m transformer.main --config=experiments/bert_mlm.py --workdir=workdirs/bert_mlm
    python -m transformer.main --config=experiments/sst2.py:init_from=workdirs/bert_mlm \
        --workdir=workdirs/sentiment      # offline sentiment set

Arguments: init_from=WORKDIR (a bert_mlm run, or a BERT converted with
`python -m transformer.tools.convert`: its model sizes, context and
tokenizer are taken into this config, its vocabulary copied),
source=offline|tsv|tfds (default offline: generated sentences whose label
says whether their adjectives are mostly pleasant), path=DIR for tsv
({train,validation}.tsv of "text<TAB>label"), runlocal. With
source=tfds the data is TFDS glue/sst2 (prepare it with `tfds build
glue/sst2` first).
"""

from transformer import configs
from transformer import workdir
from transformer.tasks import text_classification


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/sst2.py',
                            known=('init_from', 'source', 'path', 'runlocal'))
  config = text_classification.default_config()
  config.data.update(dict(source=args.get('source', 'offline'),
                          path=args.get('path', ''), max_length=64,
                          tokens_per_batch=4_096))
  config.train.init_from = args.get('init_from', '')
  # From scratch; with init_from the sizes are the pretrained workdir's.
  config.model.update(dict(size='tiny', num_layers=4, d_model=128,
                           num_heads=4, dropout_rate=0.1))
  config.optimizer.update(dict(learning_rate=1e-4, warmup_steps=100))
  config.train.update(dict(num_steps=1_000, log_every=50, eval_every=250,
                           checkpoint_every=250, keep_checkpoints=2))
  if 'runlocal' in args:
    config.data.update(dict(num_train=200, num_eval=16, vocab_size=200,
                            max_length=32, tokens_per_batch=256,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2, learning_rate=1e-3))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
  if 'init_from' in args:
    text_classification.take_pretrained(
        config, workdir.load_config(args['init_from']))
  return config
