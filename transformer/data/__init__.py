"""Data, by role: the registry of sources (`sources`), the real datasets
and their downloads (`downloads`), TFDS (`tfds_reader`), data generated
in-process (`generated/`), each kind's readers of local files (`text`,
`parallel_text`, `glue`, `images`, `captions`), the token cache
(`token_cache`), tokenizers (`tokenization`, `published_tokenizers`), batching and packing, image batches and
on-device augmentation."""
