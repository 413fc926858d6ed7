r"""Word-level language model on the Penn Treebank (Mikolov's 10k version).

    python -m transformer.main --config=experiments/ptb.py --workdir=workdirs/ptb

Documents are lines (one end-of-sentence token per line, the usual PTB
count: 929,589 / 73,760 / 82,430 tokens); words come from the training
text (9,999 words, the corpus's own `<unk>` among them, plus
end-of-sentence: the usual 10,000). A small pre-LN GPT
(4 layers, D=256, 4 heads, context 128). Evaluation on ptb.valid during
training; test perplexity by rerunning the finished workdir with
`--config.data.eval_path=../shared/data/ptb/ptb.test.txt`. Arguments:
path=FOLDER (default ../shared/data/ptb), runlocal.

Published test perplexities for comparison: LSTM (Zaremba et al. 2014)
medium 82, large 78; AWD-LSTM 57.3; Transformer-XL 54.5. Measured here: see
the README.
"""

import os

from transformer.tasks import language_modeling


def get_config(arg: str = ''):
  args = dict((item.split('=', 1) + ['true'])[:2]
              for item in arg.split(',') if item)
  folder = args.get('path', '../shared/data/ptb')
  config = language_modeling.default_config()
  config.data.update(dict(
      source='local', per='line', path=os.path.join(folder, 'ptb.train.txt'),
      eval_path=os.path.join(folder, 'ptb.valid.txt'), tokenizer='word',
      max_length=128, tokens_per_batch=8_192, eval_rows=64))
  config.model.update(dict(size='tiny', num_layers=4, d_model=256,
                           num_heads=4, dropout_rate=0.3))
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               warmup_steps=200, b2=0.99, eps=1e-8,
                               weight_decay=0.1, grad_clip_norm=1.0))
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=500,
                           checkpoint_every=500, keep_checkpoints=3))
  config.eval.update(dict(prompts=('the company said',), max_new_tokens=30))
  if 'runlocal' in args:
    config.data.update(dict(max_length=32, tokens_per_batch=256,
                            eval_rows=8))
    config.model.update(dict(num_layers=1, d_model=32, dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=4, log_every=2, eval_every=4,
                             checkpoint_every=4))
    config.eval.update(dict(max_new_tokens=5))
  return config
