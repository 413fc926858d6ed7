"""Attention: additive (Bahdanau), kernel (Nadaraya-Watson), dot-product,
multi-head, with a KV cache.

Modules: `kernels` (dot-product attention and the choice of its kernel),
`multi_head` (head projections, self- and cross-attention), `caches` (the
KV caches' layouts and the parts beam search treats apart), `classic`
(additive attention and kernel regression). Their public names are this
package's: `attention.MultiHeadAttention`, `attention.dot_product_attention`.

Conventions
-----------
Letters used in shapes and einsum strings across the codebase:

  B  batch (`...` where any number of leading batch dimensions is allowed)
  T  query length ("target")        S  key/value length ("source")
  N  query heads                     K  key/value heads, N % K == 0
  G  query heads per key/value head, G = N // K
  H  head dim                        D  model dim
  A  hidden size of the additive-attention MLP
  V  vocabulary size

Layouts are those of flax and `jax.nn.dot_product_attention`, so the fused
kernels take them without transposes: queries [..., T, N, H], keys and values
[..., S, K, H], attention weights [..., N, T, S]. Masks (`transformer.core.masks`)
are boolean, True where a query may attend to a key, and must broadcast
against [..., N, T, S]: a [T, S] mask applies to every batch element and
head, a padding mask from `masks.padding_mask` is [B, 1, 1, S].

A query row whose keys are all masked attends to nothing: its weights are all
zero and its output is zero (never NaN, never a uniform average).

Kernels (`implementation=`); a named kernel is the one that runs:
  'auto'    the default, and the only one that chooses (it logs its choice
            once): the einsum path on a CPU, where it is faster; cuDNN on
            a GPU when its constraints hold (bf16/fp16, head dim a
            multiple of 8 and at most 128) and it accepts the inputs at
            trace time, else XLA's; XLA's on a TPU. Attention dropout and
            value heads of another size than the keys' take the einsum
            path.
  'einsum'  the plain reference (`kernels`); the only one that returns
            weights (asked for weights, every choice computes them here)
            and applies attention dropout. Causal self-attention runs in
            two query halves, the first half's keys ending where its
            queries do: the quarter of the scores causality masks for
            every one of them is never computed.
  'xla'     `jax.nn.dot_product_attention(implementation='xla')`, on any
            platform.
  'cudnn'   `jax.nn.dot_product_attention(implementation='cudnn')`: cuDNN
            flash attention; raises where cuDNN cannot run the inputs.
'xla' and 'cudnn' refuse attention dropout while training, naming 'auto'.
"""


# pylint: disable=unused-import  (the package's names)
from transformer.attention import lora
from transformer.attention.caches import merge_caches
from transformer.attention.caches import split_cache
from transformer.attention.caches import track_beams
from transformer.attention.caches import tracked_beams
from transformer.attention.classic import AdditiveAttention
from transformer.attention.classic import KernelRegression
from transformer.attention.classic import nadaraya_watson
from transformer.attention.kernels import dot_product_attention
from transformer.attention.kernels import IMPLEMENTATIONS
from transformer.attention.multi_head import HeadProjection
from transformer.attention.multi_head import MultiHeadAttention
