"""The benchmarks' cost formulas, datasheet table and helpers (the scripts
run: e2e/test_benchmarks_e2e.py)."""

import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from conftest import REPO
from transformer.models import decoder

# The benchmarks run as scripts with their folder on the path.
sys.path.insert(0, os.path.join(REPO, 'benchmarks'))

import devices  # pylint: disable=g-import-not-at-top,wrong-import-position
import flops  # pylint: disable=g-import-not-at-top,wrong-import-position
import timing  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.mark.parametrize('dense, attention, expected', [
    ([(10, 3)], [], 6 * 10 * 3),
    ([(10, 3), (2, 1)], [], 6 * 30 + 6 * 2),
    # 12 x layers x queries x keys x width, in full and causal.
    ([], [flops.Attention(2, 4, 4, 8)], 12 * 2 * 4 * 4 * 8),
    ([], [flops.Attention(2, 4, 4, 8, causal=True)], 6 * 2 * 4 * 4 * 8),
    # Cross-attention: 3 target queries, 5 source keys.
    ([], [flops.Attention(1, 3, 5, 2)], 12 * 3 * 5 * 2),
])
def test_model_flops(dense, attention, expected):
  assert flops.model_flops(dense, attention) == expected


def test_decoder_flops():
  # 100 parameters, 2 rows of 4 tokens, 3 causal layers of width 8.
  assert flops.decoder_flops(100, rows=2, length=4, num_layers=3,
                             d_model=8) == 6 * 100 * 8 + 6 * 3 * 8 * 4 * 8


def test_decoder_flops_per_token_is_the_issues_formula():
  # GPT-2 small at 1,024 tokens: 6 N + 12 x layers x L x D / 2 per token.
  n, layers, length, width = 124_439_808, 12, 1024, 768
  per_token = flops.decoder_flops(n, rows=3, length=length,
                                  num_layers=layers, d_model=width) / (
                                      3 * length)
  assert per_token == 6 * n + 12 * layers * length * width / 2


def test_translation_flops():
  # Encoder self (full), decoder self (causal), cross (full), 1 layer each.
  attention = 12 * 4 * 4 * 2
  assert flops.translation_flops(
      100, rows=1, length=4, num_layers=1, d_model=2) == (
          6 * 100 * 4 + attention + attention / 2 + attention)


def test_vit_flops():
  # 2 images of 5 tokens; the 10-parameter head sees one vector per image.
  assert flops.vit_flops(110, 10, images=2, tokens=5, num_layers=1,
                         d_model=4) == (
                             6 * 100 * 10 + 6 * 10 * 2 + 12 * 10 * 5 * 4)


@pytest.mark.parametrize('kind, bf16, float32, bandwidth', [
    ('NVIDIA H100 80GB HBM3', 989.4e12, 67e12, 3.35e12),
    ('NVIDIA H100 PCIe', 756e12, 51e12, 2.0e12),
    ('NVIDIA H200', 989.4e12, 67e12, 4.8e12),
    ('NVIDIA GH200 480GB', 989.4e12, 67e12, None),
    ('NVIDIA A100-SXM4-80GB', 312e12, 19.5e12, 2.039e12),
    ('NVIDIA A100-SXM4-40GB', 312e12, 19.5e12, 1.555e12),
    ('TPU v4', 275e12, None, 1.2e12),
    ('TPU v5 lite', 197e12, None, 819e9),
    ('TPU v5', 459e12, None, 2.765e12),
    ('TPU v6 lite', 918e12, None, 1.638e12),
])
def test_datasheets(kind, bf16, float32, bandwidth):
  assert devices.peak_flops(kind, jnp.bfloat16) == bf16
  assert devices.peak_flops(kind, jnp.float16) == bf16
  assert devices.peak_flops(kind, jnp.float32) == float32
  assert devices.bandwidth(kind) == bandwidth


@pytest.mark.parametrize('kind', ['cpu', 'TPU v4 lite', 'NVIDIA T4'])
def test_unknown_devices_have_no_datasheet(kind):
  assert devices.peak_flops(kind, jnp.bfloat16) is None
  assert devices.bandwidth(kind) is None


def test_percent():
  assert timing.percent(1.0, 4.0) == '25.0%'
  assert timing.percent(1.0, None) == 'n/a'


def test_comparison_gives_the_medians_ratio_and_the_rounds_range():
  # Rounds 2/1, 3/2, 9/3: medians 3 and 2 -> 1.50x, rounds 1.50x to 3.00x.
  line = timing.comparison('lm1b', [2e-3, 3e-3, 9e-3], [1e-3, 2e-3, 3e-3])
  assert line == ('step ms (median of 3): lm1b 3, ours 2; lm1b / ours '
                  '1.50x (rounds 1.50x to 3.00x)')


def test_cache_bytes_per_position():
  # Imported here: it defines command-line flags.
  import generation  # pylint: disable=g-import-not-at-top
  config = decoder.config_for('tiny', num_kv_heads=2, dtype=jnp.bfloat16)
  params = jax.eval_shape(lambda: nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.ones((1, 8), jnp.int32),
      deterministic=True))['params'])
  model = decoder.build(config, decode=True)
  # Keys and values of 2 layers x 2 kv heads x head dim 8, 2 bytes each.
  assert generation.cache_bytes_per_position(model, params) == (
      2 * 2 * 2 * (32 // 4) * 2)
