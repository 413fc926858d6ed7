r"""Vision Transformer on the offline shapes: 32x32 images of ten shape
classes with random colours, sizes, places and noise, generated in process
(20,000 training and 2,000 test images; needs no files).

    python -m transformer.main --config=experiments/vit_offline.py \
        --workdir=workdirs/vit_offline

A 4-layer ViT of width 128 on 4x4 patches (64 patches and a class token),
random crops with 4 pixels of padding and flips, AdamW with warmup and
cosine decay. Expected result: the registry row
docs/results/vit_offline.json (test accuracy and top-5). `:runlocal` is a
seconds-long variant for tests.
"""

from transformer import configs
from transformer.tasks import image_classification


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vit_offline.py',
                            known=('runlocal',))
  config = image_classification.default_config()
  config.data.update(dict(source='offline', num_train=20_000, num_eval=2_000,
                          image_size=32, batch_size=128, crop='pad',
                          crop_padding=4, flip=True))
  config.model.update(dict(size='mu/4', num_layers=4, d_model=128,
                           num_heads=4, d_ff=256, dropout_rate=0.0))
  config.optimizer.warmup_steps = 200
  config.train.update(dict(num_steps=1_500, log_every=100, eval_every=500,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(num_train=64, num_eval=24, image_size=16,
                            batch_size=8, eval_batch_size=16,
                            randaugment_layers=2, mixup_alpha=0.2))
    config.model.update(dict(num_layers=1, d_model=32, d_ff=64))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=3))
  return config
