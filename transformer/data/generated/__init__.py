"""Data generated in-process, so that every task runs with nothing to
download: a translation grammar, sentiment labels over it, and scenes of
coloured shapes with their captions, questions and referring expressions."""
