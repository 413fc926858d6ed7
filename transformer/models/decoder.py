"""Decoder-only Transformer language model (GPT).

Token embedding plus learned or sinusoidal positions (or rotary positions
inside the attention layers), a stack of pre-LN causal self-attention blocks
(`layers.SelfAttentionStack` with `causal=True`), a final LayerNorm, and
the softmax tied to the token embedding (or, as LLaMA, its own output
layer). Packed rows carry segment ids so that no token attends across
documents. The LLaMA sizes use the shared blocks' RMSNorm, SwiGLU, rotary
positions and grouped-query attention; the rotary base and the long-context
scalings of Llama 3 and its converted relatives are the blocks' rope_*
fields (`positional.Rope`).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import layers
from transformer.core import masks
from transformer.core import positional
from transformer.models import family

Array = jax.Array

# Named sizes. gpt2* are GPT-2 (Radford et al. 2019) at its 50,257-token
# vocabulary and 1,024-token context; their reference parameter counts are
# 124,439,808 / 354,823,168 / 774,030,080 / 1,557,611,200.
GPT2 = dict(vocab_size=50_257, max_length=1_024, activation='gelu',
            norm_position='pre', positional_encoding='learned',
            layer_norm_epsilon=1e-5, dropout_rate=0.1)
LLAMA = dict(vocab_size=32_000, max_length=4_096, activation='swiglu',
             norm='rms', norm_position='pre', positional_encoding='rotary',
             use_bias=False, tie_embeddings=False, layer_norm_epsilon=1e-5,
             dropout_rate=0.0)
SIZES = {
    'tiny': dict(num_layers=2, d_model=32, num_heads=4),
    # nanoGPT's train_shakespeare_char: dropout on the attention weights too.
    'shakespeare': dict(num_layers=6, d_model=384, num_heads=6,
                        max_length=256, dropout_rate=0.2,
                        attention_dropout_rate=0.2),
    'gpt2': dict(GPT2, num_layers=12, d_model=768, num_heads=12),
    'gpt2-medium': dict(GPT2, num_layers=24, d_model=1024, num_heads=16),
    'gpt2-large': dict(GPT2, num_layers=36, d_model=1280, num_heads=20),
    'gpt2-xl': dict(GPT2, num_layers=48, d_model=1600, num_heads=25),
    # MPT-1B's shape (MosaicML's mpt-1b-redpajama-200b: 24 layers, width
    # 2,048, 16 heads of 128, no biases, context 2,048, vocabulary 50,432)
    # with learned positions instead of ALiBi: a 1.3B GPT whose heads of
    # 128 suit the fused attention kernels (the GPU benchmark's 1B row).
    'mpt-1b': dict(GPT2, vocab_size=50_432, max_length=2_048, num_layers=24,
                   d_model=2_048, num_heads=16, use_bias=False),
    # Larger published decoders, in this architecture (their own position
    # schemes and norms aside), for the model-size table.
    'megatron-8.3b': dict(GPT2, vocab_size=51_200, num_layers=72,
                          d_model=3072, num_heads=32),
    'turing-nlg': dict(GPT2, num_layers=78, d_model=4256, num_heads=28),
    'gpt3': dict(GPT2, max_length=2_048, num_layers=96, d_model=12_288,
                 num_heads=96),
    'gopher': dict(GPT2, vocab_size=32_000, max_length=2_048, num_layers=80,
                   d_model=16_384, num_heads=128),
    # LLaMA-2 (Touvron et al. 2023): pre-RMSNorm, SwiGLU, rotary positions,
    # no biases, an untied output layer; 70B with grouped-query attention
    # (8 key/value heads). Reference counts (Hugging Face, from the shapes):
    # 6,738,415,616 / 13,015,864,320 / 68,976,648,192.
    'llama2-7b': dict(LLAMA, num_layers=32, d_model=4096, num_heads=32,
                      d_ff=11_008),
    'llama2-13b': dict(LLAMA, num_layers=40, d_model=5120, num_heads=40,
                       d_ff=13_824),
    'llama2-70b': dict(LLAMA, num_layers=80, d_model=8192, num_heads=64,
                       num_kv_heads=8, d_ff=28_672),
    # Llama 3 8B's shape (Meta, 2024): grouped-query attention (8 key/value
    # heads), a 128,256-token vocabulary, an 8,192-token context and rotary
    # base 500,000; 8,030,261,248 parameters. For plans at scale
    # (docs/scaling.md).
    'llama3-8b': dict(LLAMA, vocab_size=128_256, max_length=8_192,
                      num_layers=32, d_model=4096, num_heads=32,
                      num_kv_heads=8, d_ff=14_336, rope_theta=500_000.0),
    # A LLaMA to train from scratch on a CPU (experiments/lm_offline.py:
    # model=llama): grouped-query attention (2 key/value heads for 4 query
    # heads) and d_ff = 8/3 D (LLaMA's SwiGLU width, which keeps the
    # parameters of a 4 D two-matrix layer) rounded up to a multiple of 32.
    'llama-tiny': dict(LLAMA, num_layers=4, d_model=128, num_heads=4,
                       num_kv_heads=2, d_ff=352),
}


@dataclasses.dataclass(frozen=True)
class Config(layers.TransformerConfig):
  """Block hyperparameters plus the language model's own."""
  vocab_size: int = 256
  max_length: int = 1_024  # context length
  positional_encoding: str = 'learned'
  norm_position: str = 'pre'
  activation: str = 'gelu'
  # Padding (id 0) gets no probability: for a vocabulary that has no padding
  # token of its own (a converted GPT-2, whose id 0 is an added zero row).
  mask_padding: bool = False
  # False: a separate output layer [D, V] (LLaMA), not the embedding's
  # transpose (GPT-2, the paper).
  tie_embeddings: bool = True


config_for = family.size_lookup(Config, SIZES, 'decoder')


class Decoder(nn.Module):
  """GPT: tokens [B, T] -> next-token logits [B, T, V]."""
  config: Config

  def setup(self):
    c = self.config
    self.embed = layers.TokenEmbedding(
        c.vocab_size, c.d_model, scale_by_sqrt_dim=False,
        embedding_init=nn.initializers.normal(stddev=0.02), dtype=c.dtype,
        param_dtype=c.param_dtype)
    self.positions = positional.PositionalEncoding(
        c.max_length, c.positional_encoding, c.sinusoidal_layout,
        decode=c.decode, param_dtype=c.param_dtype)
    self.dropout = nn.Dropout(c.dropout_rate)
    self.blocks = layers.SelfAttentionStack(c)
    if not c.tie_embeddings:
      self.lm_head = nn.Dense(
          c.vocab_size, use_bias=False, dtype=c.dtype,
          param_dtype=c.param_dtype, kernel_init=nn.with_logical_partitioning(
              nn.initializers.normal(stddev=0.02), ('embed', 'vocab')))

  def __call__(self, tokens: Array, *, positions: Array | None = None,
               segmentation: Array | None = None,
               key_mask: Array | None = None,
               deterministic: bool) -> Array:
    """Args:
      tokens: [B, T] ids (0 = padding).
      positions: [B, T] positions within packed documents, or of left-padded
        prompts in decode mode.
      segmentation: [B, T] document ids of packed rows (0 = padding).
      key_mask: [B, S] bool, keys that may be attended (in decode mode S is
        the cache length): hides the left padding of batched prompts.
      deterministic: disables dropout.

    Returns:
      [B, T, V] float32 logits; in decode mode T new tokens continue the
      cached sequence.
    """
    x = self.positions(self.embed(tokens), positions=positions)
    x = self.dropout(x, deterministic=deterministic)
    mask = None if segmentation is None else masks.segment_mask(
        segmentation, segmentation)
    if key_mask is not None:
      mask = masks.combine_masks(mask, key_mask[:, None, None, :])
    x = self.blocks(x, mask=mask, causal=True, positions=positions,
                    deterministic=deterministic)
    logits = (self.embed.attend(x) if self.config.tie_embeddings
              else self.lm_head(x)).astype(jnp.float32)
    if self.config.mask_padding:
      logits = logits.at[..., 0].set(masks.MASKED_LOGIT)
    return logits


def build(config: Config, *, decode: bool = False) -> Decoder:
  return Decoder(config.for_decoding() if decode else config)


def param_count(config: Config) -> int:
  """Parameters of a configuration, from shapes alone (nothing allocated;
  layers scanned, so that tracing does not grow with depth)."""
  return layers.count_parameters(
      lambda key, t: Decoder(config.replace(scan_layers=True)).init(
          key, t, deterministic=True),
      jax.ShapeDtypeStruct((1, 8), jnp.int32))

