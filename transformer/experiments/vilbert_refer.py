r"""Referring expressions on generated scenes with ViLBERT: which of ten box
proposals does 'the green circle' or 'the ring left of the square' name?
Each scene holds a confuser, so the whole expression is needed.

    python -m transformer.main --config=experiments/vilbert_offline.py \
        --workdir=workdirs/vilbert
    python -m transformer.main --config=experiments/vilbert_refer.py \
        --config.train.init_from=workdirs/vilbert --workdir=workdirs/refer

The metric is the share of expressions whose top-scoring proposal overlaps
the named object's box with IoU >= 0.5. Without init_from the model starts
from scratch; `runlocal` is a seconds-long variant for tests.
"""

from transformer import configs
from transformer.tasks import referring_expressions


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vilbert_refer.py',
                            known=('runlocal',))
  config = referring_expressions.default_config()
  config.model.update(dict(size='small', dropout_rate=0.1,
                           attention_dropout_rate=0.1))
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(num_train=40, num_eval=10, image_size=16,
                            patch_size=8, batch_size=8, eval_batch_size=8))
    config.model.update(dict(size='tiny', dropout_rate=0.0,
                             attention_dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=3))
  return config
