"""A converted GPT-2 workdir generates (greedy) with the generate command
as the reference does. Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import convert_command
from conftest import PROMPTS
from conftest import publish_gpt2
from conftest import published_and_converted

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')


published, converted = published_and_converted(publish_gpt2)


def test_generate_command_matches_reference_greedy_search(published,
                                                          converted):
  model, reference, _ = published
  _, _, workdir = converted
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.generate',
       f'--workdir={workdir}',
       '--greedy', '--max_new_tokens=10'] +
      [f'--prompt={p}' for p in PROMPTS],
      capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  eos = model.config.eos_token_id
  expected = []
  for prompt in PROMPTS:
    ids = [eos] + reference(prompt)['input_ids']
    with torch.no_grad():
      output = model.generate(torch.tensor([ids]), max_new_tokens=10,
                              do_sample=False, pad_token_id=eos,
                              eos_token_id=eos)[0, len(ids):].tolist()
    if eos in output:
      output = output[:output.index(eos)]
    expected.append(prompt + reference.decode(output))
  assert result.stdout == ''.join(f'{e}\n' + '-' * 40 + '\n'
                                  for e in expected)


def _text(path, lines):
  path.write_text('\n'.join(lines) + '\n')
  return str(path)


# 19 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_fine_tuning_starts_where_the_reference_scores_and_trains_on(
    published, converted, tmp_path):
  """experiments/lm_finetune.py from the converted workdir: its step-0
  validation loss is the reference's on the same documents (the
  checkpoint's own tokenizer, nothing rebuilt), then it trains; and it
  trains on in the converted workdir itself."""
  from conftest import copy_of  # pylint: disable=g-import-not-at-top
  from conftest import load_experiment  # pylint: disable=g-import-not-at-top
  from transformer import metrics  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  model, reference, _ = published
  _, _, source = converted
  splits = text.offline_splits(40, 6, seed=5)
  train_path = _text(tmp_path / 'train.txt', splits['train'])
  eval_lines = [line[:120].strip() for line in splits['validation']]
  eval_path = _text(tmp_path / 'eval.txt', eval_lines)
  config = load_experiment(
      'lm_finetune', f'init_from={source},path={train_path},'
      f'eval_path={eval_path},per=line,runlocal')
  config.optimizer.learning_rate = 1e-3
  workdir = tmp_path / 'finetuned'
  result = train.train_and_evaluate(config, str(workdir))
  assert sorted(p.name for p in (workdir / 'vocab').iterdir()) == [
      'gpt2_ids.json', 'gpt2_tokenizer.json']
  eos = model.config.eos_token_id
  nll = tokens = 0.0
  for line in eval_lines:
    ids = reference(line)['input_ids']
    with torch.no_grad():
      logits = model(torch.tensor([[eos] + ids])).logits[0]
      nll += float(torch.nn.functional.cross_entropy(
          logits, torch.tensor(ids + [eos]), reduction='sum'))
    tokens += len(ids) + 1
  start = metrics.read_scalars(str(workdir))['eval/loss'][0]
  assert start == pytest.approx(nll / tokens, rel=1e-5)
  assert result['loss'] < start
  _exports_to_what_transformers_loads(workdir, tmp_path / 'exported',
                                      reference, eval_lines)
  # Training on in the converted workdir: from its checkpoint 0.
  again = copy_of(source, tmp_path)
  config = load_experiment(
      'lm_finetune', f'init_from={again},path={train_path},runlocal')
  train.train_and_evaluate(config, str(again))
  assert sorted(metrics.read_scalars(str(again))['eval/loss']) == [0, 2, 4]
  assert not (again / 'vocab' / 'spm.model').exists()


def _exports_to_what_transformers_loads(workdir, output, reference, lines):
  """HF -> ours -> fine-tuned -> HF: `convert --to=hf` writes a directory
  transformers loads with no weight missing or unexpected, whose logits
  are ours, whose tokenizer gives the published ids and whose greedy
  generations are the fine-tuned workdir's."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  result = convert_command('--to=hf', f'--workdir={workdir}',
                           f'--output={output}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'the published tokenizer (gpt2)' in result.stdout
  model, info = transformers.AutoModelForCausalLM.from_pretrained(
      output, output_loading_info=True)
  assert not any(info.values()), info
  tokenizer = transformers.AutoTokenizer.from_pretrained(output)
  restored = workdir_lib.restore(str(workdir))
  ours = restored.task.tokenizer
  eos = model.config.eos_token_id
  for line in lines[:3]:
    ids = tokenizer(line)['input_ids']
    assert ids == reference(line)['input_ids']
    with torch.no_grad():
      theirs = model.eval()(torch.tensor([[eos] + ids])).logits.numpy()
    logits = restored.task.model.apply(
        {'params': restored.params},
        jnp.asarray([[1] + ours.encode(line, add_eos=False)]),
        deterministic=True)
    mine = np.asarray(logits)[..., ours.ids.to_ours(np.arange(
        theirs.shape[-1]))]
    np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=1e-4)
  # The fine-tuned workdir generates, with its own tokenizer, what the
  # exported model generates in transformers (greedy); beam search and
  # sampling run from it too.
  for flags in (['--greedy'], ['--beam_size=2'], ['--top_k=5', '--seed=1']):
    result = subprocess.run(
        [sys.executable, '-m', 'transformer.tools.generate',
         f'--workdir={workdir}', f'--prompt={PROMPTS[1]}',
         '--max_new_tokens=6', *flags],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(PROMPTS[1]), result.stdout
    if flags == ['--greedy']:
      ids = [eos] + tokenizer(PROMPTS[1])['input_ids']
      with torch.no_grad():
        output = model.generate(
            torch.tensor([ids]), max_new_tokens=6, do_sample=False,
            pad_token_id=eos, eos_token_id=eos)[0, len(ids):].tolist()
      if eos in output:
        output = output[:output.index(eos)]
      expected = PROMPTS[1] + tokenizer.decode(output)
      assert result.stdout == expected + '\n'  # one prompt: no rule
