"""Model FLOPs of a training step: one formula for every model.

    FLOPs = 6 x parameters x tokens
          + 12 x layers x keys x width per query token of each attention
            (halved when causal)

The dense term: each parameter does one multiply-add (2 FLOPs) per token
that passes through it in the forward pass and two in the backward pass
(gradients of the activations and of the weight). The attention term is the
matmuls without parameters: per query token and layer, QK^T and AV each
take 2 x keys x width FLOPs forward, three times that for forward plus
backward. A causal query sees on average half the keys, so causal
self-attention (GPT, the translation decoder's self-attention) counts half;
encoder and ViT self-attention and the decoder's cross-attention
(target queries x source keys) count in full. Padding and the document masks
of packed rows are ignored: rows count as fully used, at their full length.
Softmax, norms, activations and the optimiser update are left out, as in
every MFU figure.
"""

from typing import NamedTuple, Sequence


class Attention(NamedTuple):
  """One kind of attention layer of a model."""
  layers: int  # layers of this kind
  queries: int  # query tokens per step, all rows together
  keys: int  # keys each query attends to: the attended row's length
  width: int  # d_model (heads x head dim)
  causal: bool = False


def model_flops(dense: Sequence[tuple[int, int]],
                attention: Sequence[Attention] = ()) -> float:
  """Training-step FLOPs (module docstring).

  Args:
    dense: (parameters, tokens per step through them) pairs; usually one
      pair, the whole model and every token.
    attention: the model's attention layers.
  """
  flops = sum(6 * params * tokens for params, tokens in dense)
  for a in attention:
    flops += 12 * a.layers * a.queries * a.keys * a.width / (
        2 if a.causal else 1)
  return float(flops)


def decoder_flops(params: int, *, rows: int, length: int, num_layers: int,
                  d_model: int) -> float:
  """GPT: every token through every parameter, causal self-attention."""
  tokens = rows * length
  return model_flops([(params, tokens)], [
      Attention(num_layers, tokens, length, d_model, causal=True)])


def translation_flops(params: int, *, rows: int, length: int,
                      num_layers: int, d_model: int) -> float:
  """Encoder-decoder with source and target rows of the same length.

  Source tokens pass through the encoder, target tokens through the decoder
  and the tied embedding acting as the softmax layer (the encoder's lookup
  of it is no matmul), so with equal lengths every parameter sees
  rows x length tokens.
  """
  tokens = rows * length
  return model_flops([(params, tokens)], [
      Attention(num_layers, tokens, length, d_model),  # encoder self
      Attention(num_layers, tokens, length, d_model, causal=True),
      Attention(num_layers, tokens, length, d_model),  # cross
  ])


def vit_flops(params: int, head_params: int, *, images: int, tokens: int,
              num_layers: int, d_model: int) -> float:
  """ViT: `tokens` (patches + class token) per image through the body; the
  classifier head sees one vector per image."""
  return model_flops(
      [(params - head_params, images * tokens), (head_params, images)],
      [Attention(num_layers, images * tokens, tokens, d_model)])
