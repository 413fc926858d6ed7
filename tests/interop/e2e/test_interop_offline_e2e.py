"""The convert command without torch or transformers: a field it cannot
honour is refused in one line, leaving no workdir."""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp

from conftest import convert_command
from transformer.interop import gpt2
from transformer.models import decoder


def _convert_command(source, output):
  return convert_command('--from=hf', f'--input={source}',
                         f'--output={output}')


def test_convert_command_refuses_a_field_it_cannot_honour(tmp_path):
  """A GPT-2 whose attention is scaled by layer (the reference computes
  other logits): exit 2, one line naming the file and the field, no
  workdir."""
  config = decoder.config_for('tiny', vocab_size=7, max_length=8)
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32),
      deterministic=True)['params'])
  source = tmp_path / 'gpt2'
  gpt2.save_hf(str(source), params, config)
  for name in ('vocab.json', 'merges.txt'):
    (source / name).write_text('')
  hf = json.loads((source / 'config.json').read_text())
  (source / 'config.json').write_text(json.dumps(
      {**hf, 'scale_attn_by_inverse_layer_idx': True}))
  result = _convert_command(source, tmp_path / 'out')
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith(f'Error: {source / "config.json"}: '), error
  assert 'scale_attn_by_inverse_layer_idx=True' in error, error
  assert 'choose another checkpoint' in error, error
  assert 'Traceback' not in result.stderr
  assert sorted(os.listdir(tmp_path)) == ['gpt2']


def test_convert_command_needs_one_direction(tmp_path):
  for args, named in ((['--from=hf', '--to=hf'], '--to=hf with --workdir'),
                      (['--to=hf'], '--workdir is missing')):
    result = convert_command(*args, f'--output={tmp_path / "out"}')
    assert result.returncode == 2 and named in result.stderr, (args,
                                                               result.stderr)
    assert 'Traceback' not in result.stderr
  assert not (tmp_path / 'out').exists()
