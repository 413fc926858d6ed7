r"""BERT-style masked-language-model pretraining.

    python -m transformer.main --config=experiments/bert_mlm.py \
        --workdir=workdirs/bert_mlm          # the offline corpus
    python -m transformer.main --config=experiments/bert_mlm.py:path=DIR,per=line \
        --workdir=workdirs/bert_local        # local text

A small post-LN encoder (4 layers, D=128) with SentencePiece tokens, 15% of
tokens masked (80/10/10); `nsp` adds BERT's next-sentence prediction
(rows cut into [CLS] A [SEP] B [SEP], B half the time from another row).
Fine-tune the result for classification with
`experiments/sst2.py:init_from=workdirs/bert_mlm` or
`experiments/glue.py:task=...,init_from=workdirs/bert_mlm`. `runlocal` for
tests.
"""

from transformer import configs
from transformer.tasks import masked_language_modeling


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/bert_mlm.py',
                            known=('path', 'per', 'nsp', 'runlocal'))
  config = masked_language_modeling.default_config()
  config.data.update(dict(source='offline', num_train=20_000, num_eval=500,
                          tokenizer='sentencepiece', vocab_size=1_000,
                          max_length=128, tokens_per_batch=8_192))
  config.data.next_sentence = 'nsp' in args
  if 'path' in args:
    config.data.update(dict(source='local', path=args['path'],
                            per=args.get('per', 'line')))
  config.model.update(dict(size='tiny', num_layers=4, d_model=128,
                           num_heads=4, dropout_rate=0.1))
  config.optimizer.warmup_steps = 200
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(num_train=200, num_eval=16, vocab_size=200,
                            max_length=32, tokens_per_batch=256,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
  return config
