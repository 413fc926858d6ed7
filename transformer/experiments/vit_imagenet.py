r"""Vision Transformer from scratch on ImageNet-1k (TFDS `imagenet2012`,
streamed: prepare it once with the manual download, e.g.
`tfds build imagenet2012 --manual_dir=DIR`).

    python -m transformer.main --config=experiments/vit_imagenet.py:S/16 \
        --workdir=workdirs/vit_s16_i1k
    python -m transformer.main --config=experiments/vit_imagenet.py:B/16 \
        --workdir=workdirs/vit_b16_i1k

S/16: big_vision's `vit_s16_i1k` recipe: global average pooling, fixed 2-D
sincos positions, zero-initialised head, batch 1,024, 90 epochs, Adam
(0.9, 0.999) at 1e-3 with 10,000 warmup steps and cosine decay, decoupled
weight decay 1e-4 (here AdamW's 0.1, which optax multiplies by the learning
rate), gradient clipping at 1, Inception crop and flip, RandAugment (2
operations at magnitude 10) and mixup 0.2; published top-1 76.5% on the
validation set. B/16: the same at DeiT-B's length (300 epochs, batch 1,024,
lr 1e-3 after 5 warmup epochs, weight decay 0.05 as AdamW's decay) with
mixup 0.8 and label smoothing 0.1; DeiT-B reports 81.8% with CutMix,
stochastic depth, repeated augmentation and random erasing, which this
codebase does not have. A run needs the prepared dataset and accelerators;
none was run here. Fine-tune the result at 384 with
`experiments/vit_finetune.py:init_from=WORKDIR,image_size=384`.
Arguments: S/16 or B/16 (any ViT size), data_dir=DIR, runlocal.
"""

from transformer import configs
from transformer.tasks import image_classification

TRAIN_IMAGES = 1_281_167


def get_config(arg: str = 'S/16'):
  size = (arg or 'S/16').split(',')[0]
  args = configs.parse_args(arg[len(size):].lstrip(','),
                            name='experiments/vit_imagenet.py',
                            known=('data_dir', 'runlocal'))
  config = image_classification.default_config()
  config.data.update(dict(
      source='tfds', tfds_name='imagenet2012', stream=True,
      tfds_data_dir=args.get('data_dir', ''), train_split='train',
      eval_split='validation', image_size=224, batch_size=1_024,
      eval_batch_size=1_024, crop='none', crop_min_scale=0.08, flip=True,
      randaugment_layers=2, randaugment_magnitude=10, mixup_alpha=0.2,
      num_classes=1_000, channels=3))
  config.model.update(dict(size=size, dropout_rate=0.0, pooling='gap',
                           positional_encoding='sincos2d'))
  config.optimizer.update(dict(warmup_steps=10_000, weight_decay=0.1,
                               end_learning_rate_ratio=0.0))
  epochs = 90
  if size.startswith('B/'):
    epochs = 300
    config.data.mixup_alpha = 0.8
    config.train.label_smoothing = 0.1
    config.optimizer.update(dict(weight_decay=0.05,
                                 warmup_steps=5 * TRAIN_IMAGES // 1_024))
  steps_per_epoch = TRAIN_IMAGES // config.data.batch_size
  config.train.update(dict(num_steps=epochs * steps_per_epoch, log_every=100,
                           eval_every=5 * steps_per_epoch,
                           checkpoint_every=1_000, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(image_size=32, batch_size=4, eval_batch_size=4,
                            max_examples_per_split=6))
    config.model.update(dict(size='mu/8'))
    config.optimizer.update(dict(warmup_steps=1))
    config.train.update(dict(num_steps=3, log_every=1, eval_every=3,
                             checkpoint_every=3))
  return config
