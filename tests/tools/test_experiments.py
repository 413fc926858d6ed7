"""Experiment files: they load, take overrides, and hold the paper's values."""

import os

from absl import flags
from ml_collections import config_flags
import pytest

from conftest import load_experiment
from conftest import raises_naming
from conftest import REPO
from transformer import configs
from transformer.data import downloads
from transformer.models import encoder_decoder

# transformer.main's default; not imported, since its flags would clash with
# those of the other entry points imported by other tests.
DEFAULT_CONFIG = os.path.join(REPO, 'experiments', 'mt_offline.py')


def parse(*argv):
  """Parses flags the way `transformer.main` does."""
  values = flags.FlagValues()
  # config_flags registers the override flags from the command line it is
  # given at definition time.
  config_flags.DEFINE_config_file('config', DEFAULT_CONFIG,
                                  flag_values=values, lock_config=True,
                                  sys_argv=['main', *argv])
  values(['main', *argv])
  return values.config


def test_default_experiment_and_command_line_overrides():
  assert os.path.exists(DEFAULT_CONFIG)
  assert parse().data.source == 'offline'
  path = os.path.join(REPO, 'experiments', 'mt_local.py')
  config = parse(f'--config={path}:path=/data,src=de,tgt=en',
                 '--config.model.num_layers=4', '--config.model.d_ff=64',
                 '--config.train.num_steps=7', '--config.data.max_length=32')
  assert (config.model.num_layers, config.model.d_ff) == (4, 64)
  assert (config.train.num_steps, config.data.max_length) == (7, 32)
  assert (config.data.path, config.data.source_lang) == ('/data', 'de')
  with raises_naming(ValueError, 'mt_local.py', 'tgt', 'src=...,tgt=...'):
    load_experiment('mt_local', 'src=de')
  # Without path=, the data folder's Multi30k.
  assert load_experiment('mt_local', 'src=de,tgt=en').data.path == (
      downloads.local('multi30k'))


@pytest.mark.parametrize('variant,size,vocab,dropout,average', [
    ('ende_base', 'base', 37_000, 0.1, 5),
    ('ende_big', 'big', 37_000, 0.3, 20),
    ('enfr_big', 'big', 32_000, 0.1, 20),
])
def test_wmt14_experiments_have_the_paper_settings(variant, size, vocab,
                                                    dropout, average):
  config = load_experiment('wmt14', variant)
  assert config.model.size == size and config.model.dropout_rate == dropout
  assert config.data.vocab_size == vocab
  assert config.data.tokens_per_batch == 25_000
  d_model = encoder_decoder.SIZES[size]['d_model']
  optimizer = config.optimizer
  assert (optimizer.schedule, optimizer.warmup_steps) == ('rsqrt', 4_000)
  assert optimizer.learning_rate == pytest.approx(d_model**-0.5)
  assert (optimizer.b1, optimizer.b2, optimizer.eps) == (0.9, 0.98, 1e-9)
  assert config.train.label_smoothing == 0.1
  assert config.train.num_steps == (100_000 if size == 'base' else 300_000)
  assert (config.eval.beam_size, config.eval.length_penalty,
          config.eval.max_length_offset) == (4, 0.6, 50)
  assert config.eval.average_checkpoints == average
  model = encoder_decoder.config_for(size)
  assert model.norm_position == 'post' and model.tie_embeddings
  assert model.positional_encoding == 'sinusoidal'


def test_config_overrides_as_on_the_command_line():
  config = load_experiment('lm_offline', 'runlocal')
  changed = configs.override(
      config, 'model.scan_layers=True,mesh.data=2,optimizer.mu_dtype=bfloat16')
  assert changed.model.scan_layers is True and changed.mesh.data == 2
  assert changed.optimizer.mu_dtype == 'bfloat16'
  assert config.mesh.data == -1  # the original is untouched
  assert configs.override(config, '') == config
  with pytest.raises(configs.UnknownField, match='model.scan_layer'):
    configs.override(config, 'model.scan_layer=True')
  with raises_naming(ValueError, "'model.scan_layers'", 'field=value'):
    configs.override(config, 'model.scan_layers')
