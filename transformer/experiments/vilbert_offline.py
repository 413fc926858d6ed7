r"""ViLBERT pretraining on generated scenes (no files needed): 1 to 4
coloured shapes in a 3x3 grid of slots, two captions per image ('a red
circle left of a blue square'); masked words and masked image patches
predicted from both streams, and whether a caption (half of them swapped
within the batch) describes its image.

    python -m transformer.main --config=experiments/vilbert_offline.py \
        --workdir=workdirs/vilbert

The 'small' two-stream model (text 4 layers x 128, visual 2 layers x 128,
co-attention before text layers 2 and 3), 9 patches of 16x16 pixels per
48x48 image (one per slot of the scenes' grid, so that each object is one
region, as a detector's boxes are), 20,000 training scenes, batches of
64. Each evaluation also
ranks the first 100 test images for their captions and the reverse by the
alignment score (recall at 1, 5, 10; `--config.eval.retrieval_images=1000`
for the issue's 1,000, about 20 minutes on a 2-core CPU). `hard_negatives`
makes half of the swapped captions foils of the image's own caption (one
colour, shape or relation changed), which in-batch swaps alone never
require telling apart. `runlocal` is a seconds-long variant for tests.
"""

from transformer import configs
from transformer.tasks import vision_language


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vilbert_offline.py',
                            known=('hard_negatives', 'runlocal'))
  config = vision_language.default_config()
  config.model.update(dict(size='small', dropout_rate=0.1,
                           attention_dropout_rate=0.1))
  config.train.update(dict(num_steps=5_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'hard_negatives' in args:
    config.data.hard_negative_rate = 0.5
  if 'runlocal' in args:
    config.data.update(dict(num_train=24, num_eval=8, image_size=16,
                            patch_size=8, batch_size=8, eval_batch_size=8))
    config.eval.retrieval_images = 8
    config.model.update(dict(size='tiny', dropout_rate=0.0,
                             attention_dropout_rate=0.0))
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=3))
  return config
