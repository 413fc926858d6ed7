"""Vision Transformer (Dosovitskiy et al. 2021): an encoder over patches.

An image [B, H, W, C] is cut into P x P patches, each linearly embedded (a
strided convolution, or the equivalent `patchify` + dense), a learned class
token is prepended, position embeddings added (learned, or fixed 2-D sincos),
and the sequence goes through pre-LN encoder blocks
(`layers.SelfAttentionStack`) ending in a LayerNorm. The class token's state
(or the mean of the patch states) feeds a linear classifier that starts at
zero, so fine-tuning starts from the prior.
"""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer import layers
from transformer.core import masks

Array = jax.Array

# Widths, depths, MLP sizes and heads of the named variants (Ti, S, B, L, H
# of the ViT and DeiT papers; 'mu' for tests). With the patch size they make
# names like 'B/16'. At 224x224 and 1,000 classes the reference
# implementation counts Ti/16 5,717,416, S/16 22,050,664, B/16 86,567,656,
# B/32 88,224,232 and L/16 304,326,632 parameters; H/16 (the reference
# defines H/14) counts 632,199,400 by the same architecture.
SIZES = {
    'mu': dict(d_model=32, num_layers=2, d_ff=64, num_heads=2),
    'Ti': dict(d_model=192, num_layers=12, d_ff=768, num_heads=3),
    'S': dict(d_model=384, num_layers=12, d_ff=1536, num_heads=6),
    'M': dict(d_model=512, num_layers=12, d_ff=2048, num_heads=8),
    'B': dict(d_model=768, num_layers=12, d_ff=3072, num_heads=12),
    'L': dict(d_model=1024, num_layers=24, d_ff=4096, num_heads=16),
    'H': dict(d_model=1280, num_layers=32, d_ff=5120, num_heads=16),
}
POOLINGS = ('token', 'gap')


@dataclasses.dataclass(frozen=True)
class Config(layers.TransformerConfig):
  """Block hyperparameters plus the image model's own."""
  positional_encodings: ClassVar[tuple[str, ...]] = ('learned', 'sincos2d')

  image_size: int = 224  # square inputs
  patch_size: int = 16
  num_channels: int = 3
  num_classes: int = 1_000
  pooling: str = 'token'  # class token, or 'gap': mean of the patch states
  patch_embedding: str = 'conv'  # or 'dense' (patchify + dense, the same map)
  positional_encoding: str = 'learned'
  norm_position: str = 'pre'
  activation: str = 'gelu'
  dropout_rate: float = 0.0
  # Pad the token sequence to a multiple of this with keys no query reads
  # (`masks.KeyLengths`), dropped after the encoder: cuDNN's fused attention
  # refuses odd lengths such as B/16's 197 at 224 (200 not yet tried on a
  # GPU). Not while attention weights are kept ('intermediates' mutable).
  pad_tokens_to: int = 1

  def __post_init__(self):
    super().__post_init__()
    if self.image_size % self.patch_size:
      raise ValueError(
          f'image_size={self.image_size} is not a multiple of patch_size='
          f'{self.patch_size}; crop or resize the images to a multiple.')
    if self.pooling not in POOLINGS:
      raise ValueError(f'pooling={self.pooling!r}; choose one of {POOLINGS}.')
    if self.patch_embedding not in ('conv', 'dense'):
      raise ValueError(f"patch_embedding={self.patch_embedding!r}; choose "
                       f"'conv' or 'dense'.")
    if self.pad_tokens_to < 1:
      raise ValueError(f'pad_tokens_to={self.pad_tokens_to} must be >= 1 '
                       f'(1: no padding).')
    if self.positional_encoding == 'sincos2d' and self.d_model % 4:
      raise ValueError(f'2-D sincos positions need d_model divisible by 4, '
                       f'got {self.d_model}.')

  @property
  def grid_size(self) -> int:
    return self.image_size // self.patch_size

  @property
  def num_tokens(self) -> int:
    """Sequence length: patches plus the class token."""
    return self.grid_size**2 + (self.pooling == 'token')


def parse_size(name: str) -> tuple[str, int]:
  """'B/16' -> ('B', 16)."""
  match = re.fullmatch(r'(\w+)/(\d+)', name)
  if not match or match.group(1) not in SIZES:
    raise ValueError(f'ViT size {name!r}: expected VARIANT/PATCH with VARIANT '
                     f'one of {tuple(SIZES)}, e.g. "B/16" or "S/32".')
  return match.group(1), int(match.group(2))


def config_for(name: str, **overrides) -> Config:
  """Config of a named size such as 'S/16', with field overrides."""
  variant, patch_size = parse_size(name)
  return Config(**{**SIZES[variant], 'patch_size': patch_size,
                   **overrides})


def patchify(images: Array, patch_size: int) -> Array:
  """[B, H, W, C] -> [B, H/P, W/P, P*P*C], each patch flattened row-major
  (row, column, channel): the layout of a P x P x C convolution kernel."""
  b, h, w, c = images.shape
  p = patch_size
  x = images.reshape(b, h // p, p, w // p, p, c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(b, h // p, w // p, p * p * c)


def unpatchify(patches: Array, patch_size: int, channels: int) -> Array:
  """Inverse of `patchify`: [B, h, w, P*P*C] -> [B, h*P, w*P, C]."""
  b, gh, gw, _ = patches.shape
  p = patch_size
  x = patches.reshape(b, gh, gw, p, p, channels)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * p, gw * p, channels)


def sincos_2d(grid: int, features: int,
              max_timescale: float = 10_000.0) -> np.ndarray:
  """Fixed 2-D positions: a quarter of the features each for sin and cos of
  the column and of the row, at geometric frequencies. [grid*grid, D]."""
  rows, cols = np.meshgrid(np.arange(grid), np.arange(grid), indexing='ij')
  quarter = features // 4
  omega = max_timescale**-(np.arange(quarter) / quarter)
  col = cols.reshape(-1, 1) * omega[None]
  row = rows.reshape(-1, 1) * omega[None]
  return np.concatenate([np.sin(col), np.cos(col), np.sin(row), np.cos(row)],
                        axis=1).astype(np.float32)


def resize_position_embedding(embedding: Array, new_grid: int, *,
                              has_class_token: bool) -> Array:
  """Learned positions of one grid bilinearly resampled to another, for
  fine-tuning at a higher resolution (Dosovitskiy et al., Section 3.2).

  Args:
    embedding: [1, (1 +) g*g, D].
    new_grid: g', patches per side at the new resolution.
    has_class_token: the first position is the class token's; it is kept.

  Returns:
    [1, (1 +) g'*g', D].
  """
  token, grid = ((embedding[:, :1], embedding[:, 1:]) if has_class_token
                 else (embedding[:, :0], embedding))
  old = int(round(grid.shape[1]**0.5))
  if old * old != grid.shape[1]:
    raise ValueError(f'{grid.shape[1]} patch positions are not a square '
                     f'grid.')
  grid = grid.reshape(old, old, -1)
  if new_grid != old:
    grid = jax.image.resize(grid, (new_grid, new_grid, grid.shape[-1]),
                            method='bilinear', antialias=False)
  return jnp.concatenate([token, grid.reshape(1, new_grid * new_grid, -1)], 1)


def adapt_channels(kernel: Array, channels: int, config: Config) -> Array:
  """A patch-embedding kernel trained on `channels` input channels, for a
  model of `config.num_channels`: grey from colour sums the colour kernels
  (the colour model's response to a grey image copied into every channel);
  colour from grey spreads the grey kernel evenly over the channels."""
  mine, p = config.num_channels, config.patch_size
  if channels == mine:
    return kernel
  full = jnp.asarray(kernel).reshape(p, p, channels, -1)
  if mine == 1:
    full = full.sum(axis=2, keepdims=True)
  elif channels == 1:
    full = jnp.repeat(full / mine, mine, axis=2)
  else:
    raise ValueError(f'Cannot fine-tune a {channels}-channel model on '
                     f'{mine}-channel images.')
  if config.patch_embedding == 'dense':
    return full.reshape(p * p * mine, -1)
  return full


class VisionTransformer(nn.Module):
  """ViT: images [B, H, W, C] -> class logits [B, num_classes]."""
  config: Config

  def setup(self):
    c = self.config
    if c.patch_embedding == 'conv':
      self.embed = nn.Conv(
          c.d_model, (c.patch_size, c.patch_size),
          strides=(c.patch_size, c.patch_size), padding='VALID',
          dtype=c.dtype, param_dtype=c.param_dtype, name='embedding',
          kernel_init=nn.with_logical_partitioning(
              nn.initializers.lecun_normal(), (None, None, None, 'embed')),
          bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                 ('embed',)))
    else:
      self.embed = nn.Dense(
          c.d_model, dtype=c.dtype, param_dtype=c.param_dtype,
          name='embedding',
          kernel_init=nn.with_logical_partitioning(
              nn.initializers.lecun_normal(), (None, 'embed')),
          bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                 ('embed',)))
    if c.pooling == 'token':
      self.class_token = self.param(
          'cls', nn.with_logical_partitioning(nn.initializers.zeros,
                                              (None, None, 'embed')),
          (1, 1, c.d_model), c.param_dtype)
    if c.positional_encoding == 'learned':
      self.position_embedding = self.param(
          'pos_embedding', nn.with_logical_partitioning(
              nn.initializers.normal(stddev=0.02), (None, None, 'embed')),
          (1, c.num_tokens, c.d_model), c.param_dtype)
    self.dropout = nn.Dropout(c.dropout_rate)
    self.encoder = layers.SelfAttentionStack(c)
    self.head = nn.Dense(
        c.num_classes, dtype=c.dtype, param_dtype=c.param_dtype,
        name='head',
        kernel_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                 ('embed', None)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                               (None,)))

  def _check_images(self, images: Array) -> None:
    c = self.config
    if images.ndim != 4 or images.shape[1:] != (c.image_size, c.image_size,
                                                c.num_channels):
      raise ValueError(
          f'Images of shape {images.shape}; this model takes [B, '
          f'{c.image_size}, {c.image_size}, {c.num_channels}] (set '
          f'image_size/num_channels, or resize the inputs).')

  def embed_patches(self, images: Array) -> Array:
    """[B, H, W, C] -> patch embeddings [B, h*w, D]."""
    c = self.config
    x = images.astype(c.dtype)
    if c.patch_embedding == 'dense':
      x = patchify(x, c.patch_size)
    x = self.embed(x)
    return x.reshape(x.shape[0], -1, c.d_model)

  def encode(self, images: Array, *, deterministic: bool) -> Array:
    """[B, H, W, C] -> final states [B, num_tokens, D] (class token first
    with 'token' pooling), after the final LayerNorm."""
    self._check_images(images)
    c = self.config
    x = self.embed_patches(images)
    if c.positional_encoding == 'sincos2d':
      x = x + jnp.asarray(sincos_2d(c.grid_size, c.d_model), x.dtype)
    if c.pooling == 'token':
      token = jnp.broadcast_to(self.class_token.astype(x.dtype),
                               (x.shape[0], 1, c.d_model))
      x = jnp.concatenate([token, x], axis=1)
    if c.positional_encoding == 'learned':
      x = x + self.position_embedding.astype(x.dtype)
    x = self.dropout(x, deterministic=deterministic)
    tokens = x.shape[1]
    padded = -(-tokens // c.pad_tokens_to) * c.pad_tokens_to
    # Attention weights being kept (for figures, rollout): the real tokens'
    # only, so unpadded (the same states either way).
    if padded == tokens or self.is_mutable_collection('intermediates'):
      return self.encoder(x, deterministic=deterministic)
    x = jnp.pad(x, ((0, 0), (0, padded - tokens), (0, 0)))
    lengths = masks.KeyLengths(jnp.full((x.shape[0],), tokens, jnp.int32))
    return self.encoder(x, mask=lengths,
                        deterministic=deterministic)[:, :tokens]

  def __call__(self, images: Array, *, deterministic: bool) -> Array:
    """[B, H, W, C] float -> [B, num_classes] float32 logits."""
    states = self.encode(images, deterministic=deterministic)
    pooled = states[:, 0] if self.config.pooling == 'token' \
        else states.mean(axis=1)
    return self.head(pooled).astype(jnp.float32)


def build(config: Config) -> VisionTransformer:
  return VisionTransformer(config)


def param_count(config: Config) -> int:
  """Parameters of a configuration, from shapes alone (nothing allocated;
  layers scanned, so that tracing does not grow with depth)."""
  return layers.count_parameters(
      lambda key, x: VisionTransformer(config.replace(scan_layers=True)).init(
          key, x, deterministic=True),
      jax.ShapeDtypeStruct((1, config.image_size, config.image_size,
                            config.num_channels), jnp.float32))


def attention_rollout(weights: list[Array]) -> Array:
  """Attention rollout (Abnar & Zuidema 2020): how much each token's input
  reaches each output through all layers. Per layer the head-averaged
  weights plus the residual path, 0.5 A + 0.5 I, multiplied from the first
  layer up. [B, T, T]; rows sum to 1."""
  rollout = None
  for layer in weights:
    mixed = 0.5 * layer.mean(axis=1) + 0.5 * jnp.eye(layer.shape[-1])
    mixed = mixed / mixed.sum(-1, keepdims=True)
    rollout = mixed if rollout is None else mixed @ rollout
  return rollout
