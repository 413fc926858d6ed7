r"""Image captioning on MS-COCO (TFDS `coco_captions`, Karpathy splits:
113k training images with 5 captions each, 5k val, 5k test).

    tfds build coco_captions --data_dir=DIR   # once, on a machine with the data
    python -m transformer.main \
        --config=experiments/coco_captions.py:model=transformer,data_dir=DIR \
        --workdir=workdirs/coco_transformer
    python -m transformer.main \
        --config=experiments/coco_captions.py:model=show_attend_tell,data_dir=DIR \
        --workdir=workdirs/coco_sat

Images squared to 224x224 and held in memory (113,287 x 224 x 224 x 3 bytes
= 17 GB for the training split: give the host the memory, or lower
data.image_size); ViT-style
16x16 patch features (a 14x14 grid, as Xu et al.'s 14x14 VGG grid) trained
from scratch, SentencePiece captions of 10,000 pieces, BLEU-1..4 on the
first 5,000 `val` images. Not run here (no data, no accelerator); published
from-scratch numbers are not comparable to these settings (Xu et al. start
from an ImageNet VGG: BLEU-4 24.3 soft attention). `runlocal` runs under
tfds.testing.mock_data in the tests.
"""

from transformer import configs
from transformer.tasks import captioning


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/coco_captions.py',
                            known=('model', 'data_dir', 'runlocal'))
  config = captioning.default_config()
  config.data.update(dict(
      source='tfds', tfds_name='coco_captions',
      tfds_data_dir=args.get('data_dir', ''), train_split='train',
      eval_split='val', image_size=224, tokenizer='sentencepiece',
      vocab_size=10_000, max_length=32, batch_size=128,
      eval_batch_size=128))
  config.model.update(dict(size='small', model=args.get('model',
                                                        'transformer'),
                           encoder='vit', patch_size=16, num_layers=6,
                           d_model=512, num_heads=8, d_ff=2048,
                           embed_dim=512, hidden_dim=1024,
                           attention_dim=512, dtype='bfloat16'))
  config.eval.update(dict(num_examples=5_000, beam_size=3))
  config.optimizer.update(dict(learning_rate=4e-4, warmup_steps=2_000))
  config.train.update(dict(num_steps=50_000, log_every=200,
                           eval_every=5_000, checkpoint_every=2_000))
  if 'runlocal' in args:
    config.data.update(dict(image_size=32, max_examples_per_split=8,
                            tokenizer='word', batch_size=4,
                            eval_batch_size=4))
    config.model.update(dict(size='tiny', patch_size=8, num_layers=1,
                             d_model=32, num_heads=4, d_ff=64, embed_dim=32,
                             hidden_dim=64, attention_dim=32,
                             dtype='float32'))
    config.eval.update(dict(num_examples=4, beam_size=2))
    config.optimizer.warmup_steps = 1
    config.train.update(dict(num_steps=2, log_every=1, eval_every=2,
                             checkpoint_every=2))
  return config
