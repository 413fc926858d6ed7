r"""Vision Transformer on MNIST from its original idx files, from scratch.

    python -m transformer.main --config=experiments/vit_mnist.py \
        --workdir=workdirs/vit_mnist

A 6-layer ViT of width 64 on 4x4 patches of the 28x28 digits (49 patches
and a class token), random crops with 2 pixels of padding (no flips: digits
are not symmetric), AdamW with warmup and cosine decay, 23,500 steps of
128 images (50 epochs). Small ViTs of this shape are reported at about
99.5% test accuracy.

Measured here: registry row `earlier_mnist` (docs/results/, shown in
docs/earlier_results.md), on earlier code.

Arguments: path=FOLDER
(default: the data folder's mnist/, `python -m transformer.tools.data
fetch mnist`; the four {train,t10k}-*-ubyte.gz files),
runlocal.
"""

from transformer import configs
from transformer.data import downloads
from transformer.tasks import image_classification


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vit_mnist.py',
                            known=('path', 'runlocal'))
  config = image_classification.default_config()
  config.data.update(dict(source='mnist',
                          path=args.get('path', downloads.local('mnist')),
                          train_split='train', eval_split='test',
                          image_size=28, batch_size=128, crop='pad',
                          crop_padding=2, flip=False))
  config.model.update(dict(size='mu/4', num_layers=6, d_model=64,
                           num_heads=4, d_ff=128, dropout_rate=0.0))
  config.optimizer.warmup_steps = 500
  config.train.update(dict(num_steps=23_500, log_every=200, eval_every=2_350,
                           checkpoint_every=4_700, keep_checkpoints=3))
  if 'runlocal' in args:
    config.model.update(dict(num_layers=1, d_model=32, d_ff=64))
    config.data.update(dict(batch_size=8, eval_batch_size=500))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=4, log_every=2, eval_every=4,
                             checkpoint_every=4))
  return config
