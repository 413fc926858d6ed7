"""Workdirs written before the architecture change restore and decode as
they did then.

`fixtures/workdirs_v1/` holds what the version at commit a1204b6 wrote into
five tiny workdirs (translation, a character language model, a ViT, a
masked LM and a classifier fine-tuned from it the old way: its config.json
kept its own model sizes while the model was the masked LM's): their
config.json and small vocabulary and dataset files, and in expected.json
each one's parameter names and shapes and what that version computed from
parameters set by `seeded` below (translations, generations, class
probabilities, token ids and logits). The test rebuilds each workdir as
that version laid it out (SentencePiece models are retrained from the same
data, deterministically; checkpoints written by orbax), opens it with
today's code and compares.
"""

import json
import os
import shutil
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from PIL import Image
import pytest

from conftest import REPO
from transformer import checkpoints
from transformer import tasks
from transformer import workdir as workdir_lib
from transformer.data import images as image_data
from transformer.tools import generate
from transformer.tools import predict
from transformer.tools import translate

FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'workdirs_v1')
with open(os.path.join(FIXTURES, 'expected.json')) as f:
  EXPECTED = json.load(f)


def seeded(path: str, shape) -> np.ndarray:
  """The value of the parameter at `path` (jax keystr) in every fixture:
  N(0, 0.1) noise seeded by the path, around 1 for LayerNorm scales."""
  noise = np.random.default_rng(zlib.crc32(path.encode())).normal(
      0.0, 0.1, shape)
  return (noise + 1.0 if path.endswith("['scale']") else noise).astype(
      np.float32)


def rebuild(name: str, root) -> str:
  """The fixture workdir `name` under `root`, as the old version left it:
  its files, its vocabulary (built by the task, before any checkpoint),
  and an orbax checkpoint at the old step holding the seeded parameters."""
  workdir = str(root / name)
  if os.path.exists(workdir):
    return workdir
  shutil.copytree(os.path.join(FIXTURES, name), workdir)
  config = workdir_lib.load_config(workdir)
  tasks.build(config, workdir)  # trains or copies the vocabulary
  expected = EXPECTED[name]
  tree = {}
  for path, shape in expected['params'].items():
    keys = [k.strip("'") for k in path.strip('[]').split('][')]
    node = tree
    for key in keys[:-1]:
      node = node.setdefault(key, {})
    node[keys[-1]] = jnp.asarray(seeded(path, shape))
  mngr = checkpoints.manager(workdir)
  # The parameters only: restoring for inference reads nothing else.
  mngr.save(expected['step'], args=ocp.args.Composite(
      params=ocp.args.StandardSave(tree)))
  mngr.wait_until_finished()
  mngr.close()
  return workdir


@pytest.fixture(scope='module')
def root(tmp_path_factory):
  """The old workdirs side by side: the classifier's config names its
  pretrained workdir by the relative path 'mlm'."""
  path = tmp_path_factory.mktemp('old_workdirs')
  cwd = os.getcwd()
  os.chdir(path)
  yield path
  os.chdir(cwd)


def parameter_names(restored) -> dict[str, list[int]]:
  return {jax.tree_util.keystr(path): list(leaf.shape) for path, leaf in
          jax.tree_util.tree_flatten_with_path(restored.params)[0]}


def test_translation_workdir_translates_as_before(root):
  workdir = rebuild('mt', root)
  expected = EXPECTED['mt']
  assert parameter_names(workdir_lib.restore(workdir)) == expected['params']
  for beam in (1, 2):
    translations, step, _ = translate.translate(
        workdir, expected['sentences'], beam_size=beam, length_penalty=0.6,
        max_length_offset=5)
    assert step == expected['step']
    assert translations == expected[f'beam{beam}']


def test_language_model_workdir_generates_as_before(root):
  workdir = rebuild('lm', root)
  expected = EXPECTED['lm']
  greedy, _, _ = generate.generate(workdir, expected['prompts'],
                                max_new_tokens=12, greedy=True)
  sampled, _, _ = generate.generate(workdir, expected['prompts'],
                                 max_new_tokens=12, temperature=0.8, top_k=5,
                                 seed=3)
  # Top-k sampling has drawn among the k kept tokens since
  # `decoding.sample_tokens` (the same distribution, another random stream
  # than the old version's 'sampled'): its samples are pinned from there.
  assert (greedy, sampled) == (expected['greedy'],
                               expected['sampled_among_top_k'])


def test_image_workdir_predicts_as_before(root):
  workdir = rebuild('vit', root)
  expected = EXPECTED['vit']
  config = workdir_lib.load_config(workdir)
  pictures, _, _ = image_data.offline_shapes(
      3, 99, image_size=config.data.image_size)
  restored = workdir_lib.restore(workdir)
  assert list(restored.task.class_names) == expected['classes']
  with restored.active():
    probabilities = restored.task.predict(restored.params, pictures)
  np.testing.assert_allclose(probabilities, expected['probabilities'],
                             rtol=1e-5, atol=1e-6)
  paths = []
  for i, picture in enumerate(pictures):
    paths.append(str(root / f'shape{i}.png'))
    Image.fromarray(picture).save(paths[-1])
  best, _ = predict.classify(workdir, paths, top_k=1)
  assert [b[0][0] for _, b in best] == [
      expected['classes'][int(np.argmax(p))]
      for p in expected['probabilities']]


def encoder_outputs(name: str, root, method: str):
  workdir = rebuild(name, root)
  expected = EXPECTED[name]
  restored = workdir_lib.restore(workdir)
  assert parameter_names(restored) == expected['params']
  ids = [[1] + restored.task.tokenizer.encode(s, add_eos=False)
         for s in ('the red house sees a small cat', 'a happy dog')]
  assert ids == expected['ids']
  inputs = np.zeros((len(ids), max(map(len, ids))), np.int32)
  for row, tokens in enumerate(ids):
    inputs[row, :len(tokens)] = tokens
  logits = restored.task.model.apply({'params': restored.params}, inputs,
                                     deterministic=True, method=method)
  np.testing.assert_allclose(np.asarray(logits).reshape(-1)[:8],
                             expected['logits_first'], rtol=1e-5, atol=1e-6)
  assert float(jnp.abs(logits).sum()) == pytest.approx(
      expected['logits_sum'], rel=1e-5)
  return restored


def test_masked_lm_workdir_computes_as_before(root):
  encoder_outputs('mlm', root, 'mlm_logits')


def test_old_fine_tuned_classifier_restores_its_pretrained_model(root):
  # Its config.json says 1 layer of width 32 (the experiment's own sizes);
  # its model was the masked LM's (width 16), which restoring takes again.
  rebuild('mlm', root)  # its pretrained workdir, named in its config
  saved = json.load(open(os.path.join(FIXTURES, 'sst2', 'config.json')))
  assert saved['model']['d_model'] == 32 and 'tokenizer' not in saved['data']
  restored = encoder_outputs('sst2', root, 'classify')
  assert restored.config.model.d_model == 16
  assert restored.config.data.tokenizer == 'sentencepiece'
