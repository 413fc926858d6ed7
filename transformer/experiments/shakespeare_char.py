r"""Character-level GPT on tiny Shakespeare, the configuration of nanoGPT's
`train_shakespeare_char`: 6 layers, 6 heads, D=384, context 256, dropout
0.2 (on the attention weights too), batches of 64 x 256 characters, AdamW
(lr 1e-3, beta2 0.99, weight decay 0.1), 100 warmup steps, cosine decay to
1e-4 over 5,000 steps, gradient clipping at 1. The first 90% of the
characters train, the last 10% validate. The text is one document, read in
256-character windows shifted by a random offset every epoch
(`data.shift_chunks`; nanoGPT draws its windows at random offsets).

    python -m transformer.main --config=experiments/shakespeare_char.py \
        --workdir=workdirs/shakespeare_char
    python -m transformer.tools.generate --workdir=workdirs/shakespeare_char \
        --prompt="ROMEO:" --max_new_tokens=500

Reference (nanoGPT): best validation loss 1.47 nats per character in
5,000 iterations (it keeps the best checkpoint: the model overfits later).

Measured here: registry row `earlier_shakespeare_char` (docs/results/,
shown in docs/earlier_results.md), on earlier code.
Arguments: path=FILE (default: the data folder's tinyshakespeare/input.txt,
`python -m transformer.tools.data fetch shakespeare`),
runlocal (seconds, for tests).
"""

from transformer import configs
from transformer.data import downloads
from transformer.tasks import language_modeling


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/shakespeare_char.py',
                            known=('path', 'runlocal'))
  config = language_modeling.default_config()
  config.data.update(dict(
      source='local', per='file', train_fraction=0.9,
      path=args.get('path', downloads.local('shakespeare', 'input.txt')),
      tokenizer='char', max_length=256, tokens_per_batch=64 * 256,
      eval_rows=64,
      # The text is one document: read it in other windows every epoch
      # (nanoGPT draws its windows at random offsets).
      shift_chunks=True))
  config.model.update(dict(size='shakespeare'))
  config.optimizer.update(dict(warmup_steps=100,
                               end_learning_rate_ratio=0.1))
  config.train.update(dict(num_steps=5_000, log_every=50, eval_every=250,
                           checkpoint_every=250, keep_checkpoints=3))
  config.eval.update(dict(prompts=('ROMEO:', 'First Citizen:\n'),
                          max_new_tokens=300, temperature=0.8, top_k=200))
  if 'runlocal' in args:
    config.data.update(dict(max_length=32, tokens_per_batch=256,
                            eval_rows=4))
    config.model.update(dict(size='tiny', dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=4, log_every=2, eval_every=4,
                             checkpoint_every=4))
    config.eval.update(dict(max_new_tokens=8))
  return config
