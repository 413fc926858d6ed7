r"""Word-level language model on the Penn Treebank (Mikolov's 10k version).

    python -m transformer.main --config=experiments/ptb.py --workdir=workdirs/ptb

Each file is read as one stream, as in the literature: a line break is a
word of its own that ends every sentence, so the vocabulary is the usual
10,000 (9,999 words, the corpus's `<unk>` among them, and end-of-sentence)
and the counts are the usual 929,589 / 73,760 / 82,430 tokens (plus one end
of document). Sentences see the previous ones as context. A small pre-LN GPT
(4 layers, D=256, 4 heads, context 128). Evaluation on ptb.valid during
training; test perplexity by rerunning the finished workdir with
`--config.data.eval_path=../shared/data/ptb/ptb.test.txt`. Arguments:
path=FOLDER (default: the data folder's ptb/, `python -m
transformer.tools.data fetch ptb`), runlocal.

The stream is read in windows shifted by a random offset every epoch
(`data.shift_chunks`), not the same 128-word windows each time.

Published test perplexities for comparison: LSTM (Zaremba et al. 2014)
medium 82, large 78; AWD-LSTM 57.3; Transformer-XL 54.5.

Measured here: registry row `earlier_ptb` (docs/results/, shown in
docs/earlier_results.md), on earlier code.
"""

import os

from transformer import configs
from transformer.data import downloads
from transformer.tasks import language_modeling


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/ptb.py',
                            known=('path', 'runlocal'))
  folder = args.get('path', downloads.local('ptb'))
  config = language_modeling.default_config()
  config.data.update(dict(
      source='local', per='file', path=os.path.join(folder, 'ptb.train.txt'),
      eval_path=os.path.join(folder, 'ptb.valid.txt'), tokenizer='word',
      max_length=128, tokens_per_batch=8_192, eval_rows=64,
      shift_chunks=True))
  config.model.update(dict(size='tiny', num_layers=4, d_model=256,
                           num_heads=4, dropout_rate=0.3))
  config.optimizer.warmup_steps = 200
  config.train.update(dict(num_steps=1_500, log_every=100, eval_every=500,
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
