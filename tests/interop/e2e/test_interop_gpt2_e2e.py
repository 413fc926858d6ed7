"""A converted GPT-2 workdir generates (greedy) with the generate command
as the reference does. Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import subprocess
import sys

import pytest

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
