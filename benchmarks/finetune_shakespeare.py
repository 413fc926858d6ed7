r"""A published-shaped decoder fine-tuned on tiny Shakespeare from a
converted checkpoint, as a user runs it: validation loss before and after,
and the time it took.

    python benchmarks/finetune_shakespeare.py --family=llama \
        --text=../shared/data/tinyshakespeare/input.txt --out=/tmp/ft
    python benchmarks/finetune_shakespeare.py --family=llama --lora_rank=8 ...

transformers makes a random model (`--layers` blocks of `--width`; Llama's
shape as benchmarks/finetune_against_transformers.py has it) with a
tokenizer of `--vocab` pieces trained on the text (Llama: a SentencePiece
BPE with byte fallback, `tokenizer.model`; GPT-2: byte-level BPE,
vocab.json and merges.txt) and saves it; `transformer.tools.convert
--from=hf` converts it, and `transformer.main` runs
experiments/lm_finetune.py on the text for `--steps` steps of `--rows`
rows of the model's context (`--length`), evaluating before the first
step and at the end. The table gives the validation loss (nats per token)
and bits per byte before and after, the wall time of the fine-tuning
command and its tokens per second.
"""

import io
import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from transformer import metrics

_FAMILY = flags.DEFINE_enum('family', 'llama', ['gpt2', 'llama'],
                            'The published architecture.')
_TEXT = flags.DEFINE_string('text', None, 'The text to fine-tune on.',
                            required=True)
_OUT = flags.DEFINE_string('out', None, 'A folder for the published '
                           'directory and the workdirs.', required=True)
_LAYERS = flags.DEFINE_integer('layers', 12, 'Blocks.')
_WIDTH = flags.DEFINE_integer('width', 768, 'd_model.')
_VOCAB = flags.DEFINE_integer('vocab', 16_000, 'Tokenizer pieces.')
_LENGTH = flags.DEFINE_integer('length', 256, 'Context (tokens per row).')
_ROWS = flags.DEFINE_integer('rows', 2, 'Rows per step.')
_STEPS = flags.DEFINE_integer('steps', 500, 'Fine-tuning steps.')
_LORA_RANK = flags.DEFINE_integer('lora_rank', 0, 'LoRA rank (0: full).')


def _publish(directory: str, lines: list[str]) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  width, layers, heads = _WIDTH.value, _LAYERS.value, _WIDTH.value // 64
  torch.manual_seed(0)
  if _FAMILY.value == 'llama':
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model,
        vocab_size=_VOCAB.value, model_type='bpe', byte_fallback=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
        remove_extra_whitespaces=False, normalization_rule_name='identity',
        minloglevel=2)
    with open(os.path.join(directory, 'tokenizer.model'), 'wb') as f:
      f.write(model.getvalue())
    with open(os.path.join(directory, 'tokenizer_config.json'), 'w') as f:
      json.dump({'tokenizer_class': 'LlamaTokenizer', 'add_bos_token': True,
                 'add_eos_token': False, 'bos_token': '<s>',
                 'eos_token': '</s>', 'unk_token': '<unk>',
                 'legacy': False}, f)
    config = transformers.LlamaConfig(
        vocab_size=_VOCAB.value, hidden_size=width,
        intermediate_size=width * 8 // 3, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=_LENGTH.value, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return
  import tokenizers  # pylint: disable=g-import-not-at-top
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(lines, vocab_size=_VOCAB.value - 1,
                          min_frequency=2, show_progress=False)
  bpe.save_model(directory)
  path = os.path.join(directory, 'vocab.json')
  with open(path) as f:
    vocab = json.load(f)
  vocab['<|endoftext|>'] = len(vocab)
  with open(path, 'w') as f:
    json.dump(vocab, f)
  config = transformers.GPT2Config(
      vocab_size=len(vocab), n_positions=_LENGTH.value, n_embd=width,
      n_layer=layers, n_head=heads, bos_token_id=len(vocab) - 1,
      eos_token_id=len(vocab) - 1)
  transformers.GPT2LMHeadModel(config).save_pretrained(directory)


def _run(*command: str) -> float:
  """Runs a command of this package; its wall time in seconds."""
  start = time.perf_counter()
  subprocess.run([sys.executable, '-m', *command], check=True)
  return time.perf_counter() - start


def main(argv):
  del argv
  with open(_TEXT.value, encoding='utf-8') as f:
    text = f.read()
  # The tokenizer learns the training part alone (lm_finetune.py holds out
  # the last 10% of the text for validation, as nanoGPT's prepare.py).
  lines = text[:int(len(text) * 0.9)].splitlines()
  published = os.path.join(_OUT.value, f'published_{_FAMILY.value}')
  converted = os.path.join(_OUT.value, f'converted_{_FAMILY.value}')
  if not os.path.exists(converted):
    _publish(published, lines)
    _run('transformer.tools.convert', '--from=hf', f'--input={published}',
         f'--output={converted}')
  name = f'{_FAMILY.value}_' + (f'lora{_LORA_RANK.value}'
                                if _LORA_RANK.value else 'full')
  workdir = os.path.join(_OUT.value, name)
  overrides = [
      f'--config.data.tokens_per_batch={_ROWS.value * _LENGTH.value}',
      f'--config.train.eval_every={_STEPS.value}',
      f'--config.train.checkpoint_every={_STEPS.value}']
  if _LORA_RANK.value:
    overrides.append(f'--config.model.lora_rank={_LORA_RANK.value}')
  seconds = _run(
      'transformer.main', '--config=lm_finetune:init_from=' + converted +
      f',path={_TEXT.value},steps={_STEPS.value}', f'--workdir={workdir}',
      *overrides)
  scalars = metrics.read_scalars(workdir)
  loss, bits = scalars['eval/loss'], scalars['eval/bits_per_byte']
  first, last = min(loss), max(loss)
  tokens = _STEPS.value * _ROWS.value * _LENGTH.value
  print(f'{_FAMILY.value}, {_LAYERS.value} blocks x {_WIDTH.value}, '
        f'{_VOCAB.value:,} pieces; {_STEPS.value} steps of {_ROWS.value} x '
        f'{_LENGTH.value} tokens; {os.cpu_count()} cores')
  print('| fine-tuning | validation loss, step 0 -> last | bits per byte | '
        'wall time (compile and 2 evaluations in) | tokens/s |')
  print('|---|---|---|---|---|')
  print(f'| {name} | {loss[first]:.4f} -> {loss[last]:.4f} | '
        f'{bits[first]:.4f} -> {bits[last]:.4f} | {seconds / 60:.1f} min | '
        f'{tokens / seconds:,.0f} |')


if __name__ == '__main__':
  app.run(main)
