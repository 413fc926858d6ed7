r"""Fine-tune a trained ViT workdir, at a higher resolution and/or on
another dataset.

    python -m transformer.main --workdir=workdirs/vit_offline_48 \
        --config=experiments/vit_finetune.py:init_from=workdirs/vit_offline,image_size=48
    python -m transformer.main --workdir=workdirs/vit_ft_mnist \
        --config=experiments/vit_finetune.py:init_from=workdirs/vit_offline,source=mnist,path=../shared/data/mnist

The model is the pretrained one (its sizes and patch size); its position
embeddings are resampled bilinearly to the new patch grid, its patch
embedding is summed over colour channels for grey images (spread over them
for colour images from a grey model), and its classifier restarts at zero
when the classes differ. The data
settings are the pretrained run's unless `source=` names another
(offline|mnist|folder|tfds, with path= or tfds_name=). The recipe of
Dosovitskiy et al. (Appendix B.1.1): SGD with momentum 0.9, no weight
decay, gradient clipping at 1, cosine decay; for ImageNet at 384 they train
20,000 steps at batch 512 with learning rates in {0.003, 0.01, 0.03}:
add --config.train.num_steps=20000 --config.data.batch_size=512.
Arguments: init_from=WORKDIR (required), image_size=N, source=, path=,
tfds_name=, runlocal.
"""

from transformer import configs
from transformer import workdir
from transformer.tasks import image_classification


def get_config(arg: str = ''):
  args = configs.parse_args(
      arg, name='experiments/vit_finetune.py',
      known=('init_from', 'image_size', 'source', 'path', 'tfds_name',
             'runlocal'), required=('init_from',))
  pretrained = workdir.load_config(args['init_from'])
  config = image_classification.default_config()
  config.train.init_from = args['init_from']
  config.model = pretrained.model  # the sizes; kept in this run's config
  if 'source' in args:
    config.data.update(dict(source=args['source'],
                            path=args.get('path', ''),
                            tfds_name=args.get('tfds_name', 'cifar10')))
    if args['source'] == 'mnist':
      config.data.update(dict(image_size=28, flip=False, crop_padding=2))
  else:
    config.data = pretrained.data
  if 'image_size' in args:
    config.data.image_size = int(args['image_size'])
  config.data.load_size = 0
  config.optimizer.update(dict(name='sgd', b1=0.9, schedule='cosine',
                               learning_rate=0.01, warmup_steps=50,
                               weight_decay=0.0, grad_clip_norm=1.0,
                               end_learning_rate_ratio=0.0))
  config.train.update(dict(num_steps=500, log_every=50, eval_every=250,
                           checkpoint_every=250, keep_checkpoints=2))
  if 'runlocal' in args:
    config.optimizer.update(dict(warmup_steps=1))
    config.train.update(dict(num_steps=2, log_every=1, eval_every=2,
                             checkpoint_every=2))
  return config
