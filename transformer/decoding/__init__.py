"""Decoding, in one package: greedy search, beam search and sampling over
a step function (`search`), and the slots beam search keeps a KV cache
in, never copying it (`beam_slots`, which the attention layers' caches
use)."""

# pylint: disable=unused-import  (the package's names)
from transformer.decoding.search import PAD_ID
from transformer.decoding.search import PerExample
from transformer.decoding.search import PerSlot
from transformer.decoding.search import StepFn
from transformer.decoding.search import beam_search
from transformer.decoding.search import filter_logits
from transformer.decoding.search import greedy_search
from transformer.decoding.search import length_penalty
from transformer.decoding.search import sample
from transformer.decoding.search import sample_tokens
