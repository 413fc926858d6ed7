"""An offline sentiment set: sentences of the generated grammar
(`offline_mt`) labelled by the polarity of their adjectives."""

from __future__ import annotations

import random

from transformer.data.generated import offline_mt

# Adjectives of the offline grammar with a polarity; the rest are neutral.
PLEASANT = frozenset('beautiful happy rich famous clean sweet bright brave '
                     'clever funny strong'.split())
UNPLEASANT = frozenset('ugly sad poor strange dirty angry weak tired hungry '
                       'lazy empty'.split())


def examples(num_examples: int, seed: int, split: str
             ) -> list[tuple[str, int]]:
  """Generated sentences labelled 1 when they hold more pleasant than
  unpleasant adjectives (ties and sentences without either are skipped):
  the label depends on words anywhere in the sentence."""
  rng = random.Random(f'sentiment:{split}:{seed}')
  found = []
  while len(found) < num_examples:
    sentence = offline_mt.sample_sentence(rng).english()
    words = sentence.split()
    score = sum(w in PLEASANT for w in words) - sum(w in UNPLEASANT
                                                    for w in words)
    if score:
      found.append((sentence, int(score > 0)))
  return found
