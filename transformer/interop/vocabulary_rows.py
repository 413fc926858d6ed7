"""A checkpoint's per-token parameters moved between a published
vocabulary's ids and ours (`published_ids.IdOrder`): one place for every
family, so that conversion and export are the same move and its inverse.
"""

from __future__ import annotations

from typing import Any, Callable

from flax import traverse_util

from transformer.data import published_ids
from transformer.models import decoder

# (path, axis) of each parameter with an entry per token: the embedding
# (rows), an untied output layer (columns), output biases (BERT's masked-LM
# head, Marian's final logits).
_PER_TOKEN = ((('embed', 'embed', 'embedding'), 0), (('lm_head', 'kernel'), 1),
              (('mlm_bias',), 0), (('final_logits_bias',), 0))


def _moved(params: dict[str, Any], move: Callable[..., Any]
           ) -> dict[str, Any]:
  flat = traverse_util.flatten_dict(params)
  for path, axis in _PER_TOKEN:
    if path in flat:
      flat[path] = move(flat[path], axis=axis)
  return traverse_util.unflatten_dict(flat)


def in_our_ids(params: dict[str, Any], ids: published_ids.IdOrder
               ) -> dict[str, Any]:
  """Published parameters in our ids (a zero entry for added padding)."""
  return _moved(params, ids.rows)


def in_published_ids(params: dict[str, Any], ids: published_ids.IdOrder
                     ) -> dict[str, Any]:
  """The inverse of `in_our_ids`."""
  return _moved(params, ids.published_rows)


def decoder_in_our_ids(config: decoder.Config, params: dict[str, Any],
                       ids: published_ids.IdOrder
                       ) -> tuple[decoder.Config, dict[str, Any]]:
  """A published decoder in our ids: added padding is never predicted
  (`mask_padding`)."""
  return (config.replace(vocab_size=len(ids), mask_padding=ids.added_padding),
          in_our_ids(params, ids))


def decoder_in_published_ids(config: decoder.Config, params: dict[str, Any],
                             ids: published_ids.IdOrder | None, family: str
                             ) -> tuple[decoder.Config, dict[str, Any]]:
  """The inverse of `decoder_in_our_ids`; a decoder that never was in our
  ids (no `mask_padding`: trained here) as it is.

  Raises:
    ValueError: a converted decoder without its tokenizer's `ids`, or with
      another vocabulary's (naming `family`, e.g. 'GPT-2', for the fix).
  """
  if not config.mask_padding:
    return config, params
  if ids is None:
    raise ValueError('The model has our ids (mask_padding): give the ids '
                     "of the workdir's tokenizer, `task.tokenizer.ids`, "
                     f"to export it in {family}'s ids.")
  if config.vocab_size != len(ids) or not ids.added_padding:
    raise ValueError(
        f'The model has {config.vocab_size:,} ids (mask_padding='
        f'{config.mask_padding}) but the tokenizer\'s order {len(ids):,} '
        f'(added padding: {ids.added_padding}): give the `ids` of the '
        f"workdir's own tokenizer (`task.tokenizer.ids`).")
  return (config.replace(vocab_size=ids.published_size, mask_padding=False),
          in_published_ids(params, ids))
