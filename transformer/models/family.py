"""What every model module is: a `ModelFamily` (a Config dataclass, its
named sizes, `config_for`, `build` and `param_count`), and the decoding
interface (`DecodingFamily`) that the translation and captioning tasks'
beam search, sampling and evaluation rely on. `size_lookup` writes a
family's `config_for` from its `SIZES`."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import jax

Array = jax.Array


def size_lookup(config_class: type, sizes: Mapping[str, Mapping[str, Any]],
                what: str) -> Callable[..., Any]:
  """A family's `config_for(size, **overrides)`: `config_class` of the
  named size in `sizes` with field overrides; an unknown size is refused
  naming `what` model it is and the sizes there are."""

  def config_for(size: str, **overrides) -> Any:
    if size not in sizes:
      raise ValueError(f'Unknown {what} size {size!r}; choose one of '
                       f'{tuple(sizes)}.')
    return config_class(**{**sizes[size], **overrides})

  config_for.__doc__ = (f'The {what} Config of a named size (one of '
                        f'{tuple(sizes)}), with field overrides.')
  return config_for


@runtime_checkable
class ModelFamily(Protocol):
  """A model module (tests/models/test_models.py checks every one): tasks
  and tools size, build and count any family the same way."""

  Config: type  # a dataclass of the model's hyperparameters
  SIZES: Mapping[str, Mapping[str, Any]]  # named sizes: Config fields

  def config_for(self, size: str, **overrides) -> Any:
    """The Config of a named size, with field overrides."""

  def build(self, config: Any) -> Any:
    """The flax module of a Config."""

  def param_count(self, config: Any) -> int:
    """Parameters of a Config, from shapes alone (nothing allocated)."""


@runtime_checkable
class DecodingFamily(ModelFamily, Protocol):
  """A family that generates step by step (encoder_decoder, rnn, convs2s,
  captioning). Its `Config` has `vocab_size` and `max_length`, which the
  tasks set from the data."""

  def build(self, config: Any, *, decode: bool = False) -> Any:
    """The flax module; `decode` for step-by-step decoding."""

  def init_decoding(self, model: Any, params: Any, inputs: Array,
                    max_length: int, beam_size: int = 1) -> Any:
    """Decoding state for the inputs (source tokens [B, S], images) and
    outputs of up to `max_length`, laid out for a beam search of
    `beam_size` (its shared and per-slot parts: `decoding.PerExample`,
    `decoding.PerSlot`)."""

  def decoding_step(self, model: Any, params: Any, tokens: Array,
                    state: Any) -> tuple[Array, Any]:
    """tokens [N, 1] -> (next-token logits [N, V], the new state)."""
