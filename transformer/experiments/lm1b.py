r"""GPT language model on the One Billion Word benchmark (TFDS `lm1b`).

    tfds build lm1b --data_dir=DIR      # once, with network access
    python -m transformer.main --config=experiments/lm1b.py \
        --workdir=workdirs/lm1b --config.data.tfds_data_dir=DIR

Sentences are documents, SentencePiece tokens (32k), a GPT-2-small-shaped
model with a 128-token context. Not run here (no data and no accelerator on
the development machine); `runlocal` runs on `tfds.testing.mock_data` in the
tests.
"""

from transformer import configs
from transformer.tasks import language_modeling


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/lm1b.py',
                            known=('runlocal',))
  config = language_modeling.default_config()
  config.data.update(dict(source='tfds', tfds_name='lm1b',
                          train_split='train', eval_split='test',
                          tokenizer='sentencepiece', vocab_size=32_000,
                          max_length=128, tokens_per_batch=65_536,
                          eval_rows=256))
  config.model.update(dict(size='gpt2', dropout_rate=0.1))
  config.optimizer.update(dict(learning_rate=6e-4, warmup_steps=2_000,
                               b2=0.95))
  config.train.update(dict(num_steps=100_000, log_every=100,
                           eval_every=5_000, checkpoint_every=2_000,
                           keep_checkpoints=3))
  config.eval.update(dict(prompts=('The',), max_new_tokens=40))
  if 'runlocal' in args:
    config.data.update(dict(vocab_size=200, max_length=32,
                            tokens_per_batch=256, eval_rows=8,
                            max_examples_per_split=64))
    config.model.update(dict(size='tiny', dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=4, log_every=2, eval_every=4,
                             checkpoint_every=4))
    config.eval.update(dict(max_new_tokens=4))
  return config
