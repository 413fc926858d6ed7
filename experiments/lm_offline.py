r"""Language model on the offline corpus: documents of 1-8 generated English
sentences, a small GPT, SentencePiece tokens. Needs no files.

    python -m transformer.main --config=experiments/lm_offline.py \
        --workdir=workdirs/lm_offline

`:runlocal` is a seconds-long variant for tests.
"""

from transformer.tasks import language_modeling


def get_config(arg: str = ''):
  config = language_modeling.default_config()
  config.data.update(dict(source='offline', num_train=20_000, num_eval=500,
                          tokenizer='sentencepiece', vocab_size=1_000,
                          max_length=128, tokens_per_batch=4_096))
  config.model.update(dict(size='tiny', num_layers=4, d_model=128,
                           num_heads=4, dropout_rate=0.1))
  config.optimizer.warmup_steps = 100
  config.train.update(dict(num_steps=2_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  config.eval.update(dict(prompts=('The red ', 'Three '), max_new_tokens=60))
  if arg == 'runlocal':
    config.data.update(dict(num_train=300, num_eval=20, vocab_size=200,
                            max_length=32, tokens_per_batch=256,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
    config.eval.update(dict(max_new_tokens=8))
  elif arg:
    raise ValueError(f"Unknown argument {arg!r}; use '' or 'runlocal'.")
  return config
