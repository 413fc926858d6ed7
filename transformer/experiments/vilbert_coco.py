r"""ViLBERT pretraining on MS-COCO captions (TFDS `coco_captions`, Karpathy
splits: 113k training images with about 5 captions each).

    tfds build coco_captions --data_dir=DIR   # once, on a machine with the data
    python -m transformer.main \
        --config=experiments/vilbert_coco.py:data_dir=DIR \
        --workdir=workdirs/vilbert_coco

Regions are 16x16 patches of 224x224 images (a 14x14 grid, each region's
768 pixel values its features; ViLBERT uses a Faster R-CNN's 10 to 36
detected regions, which this codebase does not train). COCO has no region
classes here, so a masked region regresses its features; captions swapped
within the batch train the alignment, and each evaluation ranks the first
100 `val` images for their first captions (recall at 1, 5, 10). The two
streams are `size=small` unless `size=vilbert` (the paper's 6-layer,
1,024-wide visual stream beside BERT-base). Images are held in memory
(17 GB at 224x224 for the training split). Not run here (no data, no
accelerator); `runlocal` runs under tfds.testing.mock_data in the tests.
"""

from transformer import configs
from transformer.tasks import vision_language


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vilbert_coco.py',
                            known=('data_dir', 'size', 'runlocal'))
  config = vision_language.default_config()
  config.data.update(dict(
      source='tfds', tfds_name='coco_captions',
      tfds_data_dir=args.get('data_dir', ''), train_split='train',
      eval_split='val', image_size=224, patch_size=16,
      tokenizer='sentencepiece', vocab_size=10_000, max_length=32,
      batch_size=256, eval_batch_size=256))
  config.model.update(dict(size=args.get('size', 'small'), dtype='bfloat16',
                           dropout_rate=0.1, attention_dropout_rate=0.1))
  config.optimizer.update(dict(learning_rate=1e-4, warmup_steps=2_000))
  config.train.update(dict(num_steps=50_000, log_every=200,
                           eval_every=5_000, checkpoint_every=2_000))
  if 'runlocal' in args:
    config.data.update(dict(image_size=32, patch_size=8, tokenizer='word',
                            max_examples_per_split=8, batch_size=4,
                            eval_batch_size=4))
    config.eval.retrieval_images = 4
    config.model.update(dict(size='tiny', dtype='float32', dropout_rate=0.0,
                             attention_dropout_rate=0.0))
    config.optimizer.warmup_steps = 1
    config.train.update(dict(num_steps=2, log_every=1, eval_every=2,
                             checkpoint_every=2))
  return config
