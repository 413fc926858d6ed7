"""Data: generated sources (offline_mt, offline_sentiment, images,
captions), local files and TFDS, tokenizers, batching and packing, image
sources and on-device augmentation."""
