"""Published checkpoints in and out: readers that never unpickle (`files`),
one module per model family (`gpt2`, `bert`, `vit`, `marian`: parameters
mapped both ways, names and shapes checked), their tokenizers in our id
conventions (`vocabularies`), and converted workdirs (`workdirs`)."""
