r"""Vision Transformer from scratch on CIFAR-10 (TFDS `cifar10`; prepare it
once with `tfds build cifar10`).

    python -m transformer.main --config=experiments/vit_cifar10.py \
        --workdir=workdirs/vit_cifar10

The compact ViT-Lite-7/4 shape of Hassani et al. 2021 ("Escaping the Big
Data Paradigm with Compact Transformers"): 7 layers, width 256, 4 heads, MLP
512, 4x4 patches of the 32x32 images (64 patches and a class token), about
3.7M parameters; their recipe trains 300 epochs (batch 128, AdamW 5e-4,
weight decay 0.03, cosine, label smoothing 0.1, AutoAugment, mixup and
CutMix) and reports 91.4% test accuracy. Here: the same shape, schedule and
optimiser, with random crops with padding, flips, RandAugment (2 operations
at magnitude 9) and mixup (alpha 0.8) in place of AutoAugment and CutMix.
Arguments: data_dir=DIR (TFDS data directory), runlocal.
"""

from transformer import configs
from transformer.tasks import image_classification


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vit_cifar10.py',
                            known=('data_dir', 'runlocal'))
  config = image_classification.default_config()
  config.data.update(dict(
      source='tfds', tfds_name='cifar10', tfds_data_dir=args.get('data_dir',
                                                                 ''),
      train_split='train', eval_split='test', image_size=32, batch_size=128,
      eval_batch_size=500, crop='pad', crop_padding=4, flip=True,
      randaugment_layers=2, randaugment_magnitude=9, mixup_alpha=0.8,
      num_classes=10, channels=3))
  config.model.update(dict(size='mu/4', num_layers=7, d_model=256,
                           num_heads=4, d_ff=512, dropout_rate=0.1))
  config.train.label_smoothing = 0.1
  steps_per_epoch = 50_000 // 128
  config.optimizer.update(dict(learning_rate=5e-4,
                               warmup_steps=10 * steps_per_epoch,
                               weight_decay=0.03))
  config.train.update(dict(num_steps=300 * steps_per_epoch, log_every=200,
                           eval_every=10 * steps_per_epoch,
                           checkpoint_every=5 * steps_per_epoch,
                           keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(max_examples_per_split=16, batch_size=8,
                            eval_batch_size=8))
    config.model.update(dict(num_layers=1, d_model=32, d_ff=64))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=4, log_every=2, eval_every=4,
                             checkpoint_every=4))
  return config
