r"""Image captioning on generated scenes: two coloured shapes side by side or
one above the other, captioned 'a red circle left of a blue square' (two
references per image, each relation and its inverse); needs no files.

    python -m transformer.main \
        --config=experiments/captioning_offline.py:model=show_attend_tell \
        --workdir=workdirs/captions_sat
    python -m transformer.main \
        --config=experiments/captioning_offline.py:model=transformer \
        --workdir=workdirs/captions_transformer

Both on the same 3-layer CNN grid (4x4 cells of 128 features for 32x32
images), 10,000 training scenes (20,000 captions), batches of 64, Adam with
warmup and cosine decay; `encoder=vit` uses ViT patch features instead.
Evaluation: BLEU-1..4 and exact match of greedy captions of 500 test
scenes, and attention figures in WORKDIR/plots. Expected results: the
registry rows docs/results/captioning_show_attend_tell.json and
captioning_transformer.json. `runlocal` is a seconds-long variant for
tests.
"""

from transformer import configs
from transformer.tasks import captioning


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/captioning_offline.py',
                            known=('model', 'encoder', 'runlocal'))
  config = captioning.default_config()
  config.data.update(dict(source='offline', num_train=10_000, num_eval=500,
                          image_size=32, tokenizer='word', max_length=12,
                          batch_size=64))
  config.model.update(dict(size='small', model=args.get('model',
                                                        'transformer'),
                           encoder=args.get('encoder', 'cnn'),
                           dropout_rate=0.1))
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(num_train=48, num_eval=8, image_size=16,
                            batch_size=8, eval_batch_size=8))
    config.model.update(dict(size='tiny', dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=3))
  return config
