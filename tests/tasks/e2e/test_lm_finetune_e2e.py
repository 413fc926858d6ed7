"""Fine-tuning a language model on local text (experiments/lm_finetune.py):
the run starts from the checkpoint, reads the text with its vocabulary
(none is built), evaluates before the first step and learns the text."""

import jax
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import checkpoints
from transformer import metrics
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import text


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory):
  """A language model of the offline corpus, and a text of other words."""
  config = load_experiment('lm_offline', 'runlocal')
  workdir = str(tmp_path_factory.mktemp('pretrained'))
  train.train_and_evaluate(config, workdir)
  corpus = tmp_path_factory.mktemp('text') / 'input.txt'
  corpus.write_text('\n'.join(text.offline_splits(60, 10, seed=3)['train']))
  return workdir, str(corpus)


def test_fine_tuning_starts_from_the_checkpoint_and_learns_the_text(
    pretrained, tmp_path):
  source, corpus = pretrained
  config = load_experiment('lm_finetune',
                           f'init_from={source},path={corpus},runlocal')
  config.optimizer.learning_rate = 1e-3  # a few steps must show learning
  config.train.update(num_steps=6, eval_every=6, checkpoint_every=6)
  workdir = str(tmp_path / 'finetuned')
  result = train.train_and_evaluate(config, workdir)
  # The pretrained vocabulary, byte for byte: no other was built.
  assert (tmp_path / 'finetuned' / 'vocab' / 'spm.model').read_bytes() == (
      open(f'{source}/vocab/spm.model', 'rb').read())
  assert config.model.to_dict() == workdir_lib.load_config(
      source).model.to_dict()
  # Step 0 evaluates the pretrained parameters on the new validation text.
  start = metrics.read_scalars(workdir)['eval/loss'][0]
  trainer = train.Trainer(config, workdir)
  expected = trainer.evaluate(workdir_lib.restore(source).params, 'check')
  assert start == pytest.approx(expected['loss'], rel=1e-5)
  assert {'eval/perplexity', 'eval/bits_per_byte'} <= set(
      metrics.read_scalars(workdir))
  assert result['loss'] < start - 0.05


def test_a_workdir_of_another_task_is_refused(tmp_path):
  from conftest import fake_workdir  # pylint: disable=g-import-not-at-top
  other = fake_workdir(tmp_path / 'mt', 'translation')
  with raises_naming(ValueError, f'init_from={other}', "'translation'",
                     'language_modeling workdir'):
    load_experiment('lm_finetune', f'init_from={other},path=input.txt')
  with raises_naming(ValueError, 'lm_finetune.py needs path',
                     'init_from=...'):
    load_experiment('lm_finetune', f'init_from={other}')


def test_another_task_in_a_language_model_workdir_names_how_to_train_on(
    pretrained):
  source, _ = pretrained
  with raises_naming(checkpoints.IncompatibleCheckpoint, "task: 'language_modeling' -> 'translation'",
                     f'experiments/lm_finetune.py:init_from={source}'):
    train.train_and_evaluate(load_experiment('mt_offline', 'runlocal'),
                             source)


def test_a_checkpoint_without_its_tokenizer_is_refused(pretrained, tmp_path):
  """A new vocabulary would not match the checkpoint's embeddings."""
  import shutil  # pylint: disable=g-import-not-at-top
  source, corpus = pretrained
  bare = tmp_path / 'bare'
  shutil.copytree(source, bare, ignore=shutil.ignore_patterns('vocab'))
  config = load_experiment('lm_finetune',
                           f'init_from={bare},path={corpus},runlocal')
  with raises_naming(FileNotFoundError, f'{bare}/vocab is missing',
                     'convert the checkpoint again'):
    train.train_and_evaluate(config, str(tmp_path / 'finetuned'))
  assert not (tmp_path / 'finetuned' / 'vocab').exists()
  assert not (tmp_path / 'finetuned' / 'checkpoints').exists()


def test_lora_checkpoints_hold_the_adapters_and_export_merges_them(
    pretrained, tmp_path, monkeypatch):
  """Adapters train (the base stays) and checkpoints hold them alone, on
  the base they name (absolute, though init_from was relative); a rerun
  resumes them, and restoring (for generate, from any directory) and
  export fold them into the kernels: the exported model, read back,
  computes the adapted logits."""
  import os  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from transformer.attention import lora  # pylint: disable=g-import-not-at-top
  from transformer.interop import export  # pylint: disable=g-import-not-at-top
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  from transformer.models import decoder  # pylint: disable=g-import-not-at-top
  source, corpus = pretrained
  config = load_experiment(
      'lm_finetune', f'init_from={os.path.relpath(source)},path={corpus},'
      f'runlocal')
  config.model.update(dict(lora_rank=4, lora_targets='query,key,value,out'))
  config.optimizer.learning_rate = 1e-2
  config.train.update(num_steps=2)
  workdir = str(tmp_path / 'lora')
  train.train_and_evaluate(config, workdir)
  mngr = checkpoints.manager(workdir, read_only=True)
  saved = checkpoints.param_shapes(mngr, 2)
  assert saved and all(name.endswith(("['lora_a']", "['lora_b']"))
                       for name in saved), saved
  base_step = load_experiment('lm_offline', 'runlocal').train.num_steps
  assert checkpoints.adapters_base(mngr, 2) == {'workdir': source,
                                                'step': base_step}
  mngr.close()
  config.train.update(num_steps=4)  # resumed onto the same base
  train.train_and_evaluate(config, workdir)
  monkeypatch.chdir(tmp_path)  # the base is found from anywhere
  restored = workdir_lib.restore(workdir)
  assert restored.step == 4 and restored.task.model_config.lora is None
  # `generate` runs the merged model: greedy, it continues as the
  # adapted model's logits say.
  from transformer.tools import generate  # pylint: disable=g-import-not-at-top
  generated = generate.generate(workdir, ['a b'], greedy=True,
                                max_new_tokens=2)
  assert generated.step == 4 and len(generated.samples) == 1
  assert not any(lora.is_adapter(tuple(str(getattr(k, 'key', k)) for k in p))
                 for p, _ in jax.tree_util.tree_flatten_with_path(
                     restored.params)[0])
  written = export.export(workdir, str(tmp_path / 'hf'))
  assert written.startswith('GPT-2')
  hf_config, hf_params = gpt2.load(str(tmp_path / 'hf'))
  tokens = jnp.asarray([[1, 5, 9, 13, 17, 21]])
  adapted = restored.task.model.apply({'params': restored.params}, tokens,
                                      deterministic=True)
  exported = decoder.Decoder(hf_config).apply({'params': hf_params}, tokens,
                                              deterministic=True)
  np.testing.assert_allclose(exported, adapted, atol=1e-5)
  base = workdir_lib.restore(source)
  assert np.abs(np.asarray(adapted) - np.asarray(base.task.model.apply(
      {'params': base.params}, tokens, deterministic=True))).max() > 1e-4
  # Adapters without their base cannot be read: named, with the fix.
  moved = tmp_path / 'moved'
  shutil.move(source, moved)
  try:
    with raises_naming(FileNotFoundError,
                       f'checkpoint {base_step} of {source}',
                       'put that workdir and its checkpoint'):
      workdir_lib.restore(workdir)
  finally:
    shutil.move(moved, source)


def test_adapters_without_a_base_to_name_are_saved_with_every_weight(
    tmp_path):
  """LoRA on a model drawn from the seed (no init_from): the seed's draw is
  no record to restore from, so the checkpoint holds every weight, and
  restoring folds the adapters in as for a base."""
  from transformer.attention import lora  # pylint: disable=g-import-not-at-top
  config = load_experiment('lm_offline', 'runlocal')
  config.model.lora_rank = 2
  config.train.update(num_steps=4, checkpoint_every=4, eval_every=4)
  workdir = str(tmp_path / 'lora')
  train.train_and_evaluate(config, workdir)
  mngr = checkpoints.manager(workdir, read_only=True)
  saved = checkpoints.param_shapes(mngr, 4)
  assert checkpoints.adapters_base(mngr, 4) is None
  mngr.close()
  assert any('lora_a' in name for name in saved)
  assert any("['embed']" in name for name in saved)
  restored = workdir_lib.restore(workdir)
  assert restored.task.model_config.lora is None
  assert not any(lora.A in jax.tree_util.keystr(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(restored.params)[0])


def test_adapters_are_not_trained_into_their_base(pretrained):
  source, corpus = pretrained
  config = load_experiment('lm_finetune',
                           f'init_from={source},path={corpus},runlocal')
  config.model.lora_rank = 2
  with raises_naming(ValueError, f'--workdir={source}', 'new --workdir'):
    train.train_and_evaluate(config, source)
  config.eval.average_checkpoints = 2
  with raises_naming(ValueError, 'average_checkpoints=2', 'set it to 1'):
    train.train_and_evaluate(config, source + '_other')
