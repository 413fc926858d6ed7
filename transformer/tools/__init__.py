"""The command-line tools, thin: flags -> the library. Each has a `main`
(`python -m transformer.tools.NAME`, or the console script
`transformer-NAME`) and a function that does the same from python:
translate, generate, predict, convert, compare, sizes, reproduce, demo.
Training is `python -m transformer.main` (`transformer-train`)."""
