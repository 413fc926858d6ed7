"""Reproducing published tables: table specifications (`specs`), running or
launching their rows (`rows`), where each row's run stands (`outcomes`), and
the rendered table (`tables`). `python -m transformer.tools.reproduce` is
the command."""
