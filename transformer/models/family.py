"""What every model module shares: configs of named sizes, and the
interface a translation model family has (`TranslationFamily`), which the
translation task's beam search, sampling and evaluation rely on."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

import jax

Array = jax.Array


def sized(config_class: type, sizes: Mapping[str, Mapping[str, Any]],
          size: str, what: str, overrides: Mapping[str, Any]) -> Any:
  """`config_class` of the named size in `sizes`, with field overrides;
  an unknown size is refused naming `what` model it is and the sizes."""
  if size not in sizes:
    raise ValueError(f'Unknown {what} size {size!r}; choose one of '
                     f'{tuple(sizes)}.')
  return config_class(**{**sizes[size], **overrides})


@runtime_checkable
class TranslationFamily(Protocol):
  """A module (encoder_decoder, rnn, convs2s) the translation task builds,
  trains and decodes through. Its `Config` is a dataclass with
  `vocab_size` and `max_length`, which the task sets from the data."""

  Config: type
  SIZES: Mapping[str, Mapping[str, Any]]

  def config_for(self, size: str, **overrides) -> Any:
    """The Config of a named size, with field overrides."""

  def build(self, config: Any, *, decode: bool = False) -> Any:
    """The flax module; `decode` for step-by-step decoding."""

  def init_decoding(self, model: Any, params: Any, inputs: Array,
                    max_length: int, beam_size: int = 1) -> Any:
    """Decoding state for source tokens [B, S] and outputs of up to
    `max_length`, laid out for a beam search of `beam_size` (its shared
    and per-slot parts: `decoding.PerExample`, `decoding.PerSlot`)."""

  def decoding_step(self, model: Any, params: Any, tokens: Array,
                    state: Any) -> tuple[Array, Any]:
    """tokens [N, 1] -> (next-token logits [N, V], the new state)."""
