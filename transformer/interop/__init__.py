"""Published checkpoints in and out: readers that never unpickle (`files`),
one module per model family (`gpt2`, `bert`, `vit`, `marian`, `llama`:
parameters mapped both ways, names and shapes checked), and converted
workdirs (`workdirs`); their tokenizers, in our id conventions, are
`transformer.data.published_tokenizers`."""
