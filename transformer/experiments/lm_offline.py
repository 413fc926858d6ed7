r"""Language model on the offline corpus: documents of 1-8 generated English
sentences, a small GPT, SentencePiece tokens. Needs no files.

    python -m transformer.main --config=experiments/lm_offline.py \
        --workdir=workdirs/lm_offline

`:model=llama` trains the LLaMA family from scratch instead (decoder size
'llama-tiny': pre-RMSNorm, SwiGLU, rotary positions, grouped-query attention
with 2 key/value heads for 4 query heads, an untied output layer), at the
same width and depth:

    python -m transformer.main \
        --config=experiments/lm_offline.py:model=llama \
        --workdir=workdirs/lm_offline_llama

Expected result with --config.train.num_steps=1000: the registry row
docs/results/lm_offline.json (validation perplexity and accuracy).

Its rotary settings are the model section's rope_* fields, e.g.
`--config.model.rope_theta=500000.0`. `:runlocal` (also
`:model=llama,runlocal`) is a seconds-long variant for tests.
"""

from transformer import configs
from transformer.tasks import language_modeling

# The decoder families this experiment trains (its `model=` argument).
MODELS = ('gpt', 'llama')


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='lm_offline.py',
                            known=('model', 'runlocal'))
  model = args.get('model', 'gpt')
  if model not in MODELS:
    raise ValueError(f'lm_offline.py: model={model!r}; choose one of '
                     f'{MODELS}.')
  config = language_modeling.default_config()
  config.data.update(dict(source='offline', num_train=20_000, num_eval=500,
                          tokenizer='sentencepiece', vocab_size=1_000,
                          max_length=128, tokens_per_batch=4_096))
  if model == 'llama':  # the size table's shape, kept whole
    config.model.update(dict(size='llama-tiny'))
  else:
    config.model.update(dict(size='tiny', num_layers=4, d_model=128,
                             num_heads=4, dropout_rate=0.1))
  config.optimizer.warmup_steps = 100
  config.train.update(dict(num_steps=2_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  config.eval.update(dict(prompts=('The red ', 'Three '), max_new_tokens=60))
  if 'runlocal' in args:
    config.data.update(dict(num_train=300, num_eval=20, vocab_size=200,
                            max_length=32, tokens_per_batch=256,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    if model == 'llama':
      config.model.d_ff = 96  # 8/3 D, as the size's own
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
    config.eval.update(dict(max_new_tokens=8))
  return config
