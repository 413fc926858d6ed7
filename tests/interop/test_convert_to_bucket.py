"""A workdir converted into a bucket (gs://, against a GCS emulator in this
process) is the one converted locally: the conversion is staged and
checked on local disk, then uploaded. Skipped without torch, transformers
or the emulator."""

import jax
import numpy as np
import pytest

from conftest import raises_naming
from transformer import storage
from transformer import workdir as workdir_lib
from transformer.interop import workdirs

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')


def test_convert_into_a_bucket_writes_what_a_local_convert_writes(
    gcs_in_process, tmp_path, monkeypatch):
  del gcs_in_process
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
  config = transformers.ViTConfig(
      image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=1,
      num_attention_heads=2, intermediate_size=32, num_labels=3)
  torch.manual_seed(0)
  transformers.ViTForImageClassification(config).save_pretrained(
      tmp_path / 'vit')
  local, bucket = str(tmp_path / 'local'), 'gs://bucket/converted/vit'
  workdirs.convert('hf', str(tmp_path / 'vit'), local)
  workdirs.convert('hf', str(tmp_path / 'vit'), bucket)

  def names(workdir):  # but TensorStore's data files, named at random
    return [name for name, _ in storage.walk_files(workdir)
            if '/d/' not in name]
  assert names(bucket) == names(local)
  for name in ('config.json', 'dataset.json'):
    assert storage.read_text(f'{bucket}/{name}') == storage.read_text(
        f'{local}/{name}')
  ours, theirs = workdir_lib.restore(bucket), workdir_lib.restore(local)
  assert ours.step == theirs.step == 0
  for a, b in zip(jax.tree.leaves(ours.params),
                  jax.tree.leaves(theirs.params), strict=True):
    np.testing.assert_array_equal(a, b)
  # Nothing is left staged on local disk.
  assert not list((tmp_path / 'cache').rglob('*.converting-*'))
  with raises_naming(ValueError, bucket, '--output'):
    workdirs.convert('hf', str(tmp_path / 'vit'), bucket)
