r"""Fine-tuning a language model on your own text: a converted GPT-2 or
Llama (`python -m transformer.tools.convert --from=hf`) or a decoder
trained here, with the checkpoint's own tokenizer and ids.

    python -m transformer.tools.convert --from=hf --input=gpt2 \
        --output=workdirs/gpt2
    python -m transformer.main \
        --config=experiments/lm_finetune.py:init_from=workdirs/gpt2,path=input.txt \
        --workdir=workdirs/gpt2_shakespeare

Arguments: init_from=WORKDIR (required: a language-modelling workdir; its
model family, sizes, positions, rotary settings, context and tokenizer are
taken whole, so no vocabulary is built), path=FILE_OR_DIR (UTF-8 text, or a
folder of *.txt), eval_path=FILE_OR_DIR (validation text; without it the
last 10% of the text, as nanoGPT's prepare.py splits tiny Shakespeare),
per=file|line (a document per file, the default, or per line), steps=N,
runlocal (a seconds-long variant for tests).

The recipe is nanoGPT's `config/finetune_shakespeare.py`: AdamW (0.9,
0.95) with weight decay 0.1 at a constant learning rate of 3e-5, gradients
clipped at 1, 20 steps, evaluated before the first step and every 5. Its
batches are 32 x 1,024 tokens; here 8,192 tokens a step, which a CPU
takes (`--config.data.tokens_per_batch=32768` for theirs). Evaluation
reports perplexity and bits per byte of the validation text.
`--config.model.lora_rank=8` trains low-rank adapters on the attention
projections instead of every weight (`transformer.attention.lora`). Rerunning
into the same workdir resumes it; `--workdir` equal to `init_from` trains
on in the converted workdir itself.
"""

from transformer import configs
from transformer import workdir
from transformer.tasks import language_modeling

# Data settings that decide the ids: taken from the pretrained workdir.
_VOCABULARY = ('tokenizer', 'tokenizer_model_type', 'vocab_size')


def get_config(arg: str = ''):
  args = configs.parse_args(
      arg, name='lm_finetune.py', required=('init_from', 'path'),
      known=('init_from', 'path', 'eval_path', 'per', 'steps', 'runlocal'))
  source = args['init_from']
  pretrained = workdir.load_config(source)
  if pretrained.task != 'language_modeling':
    raise ValueError(
        f'lm_finetune.py: init_from={source} trained a {pretrained.task!r} '
        f'task; fine-tune a language_modeling workdir (a converted GPT-2 or '
        f'Llama, or a run of experiments/lm_offline.py).')
  config = language_modeling.default_config()
  config.model = pretrained.model
  config.data.update({key: pretrained.data[key] for key in _VOCABULARY})
  config.data.update(dict(
      source='local', path=args['path'],
      eval_path=args.get('eval_path', ''), per=args.get('per', 'file'),
      train_fraction=0.9, max_length=pretrained.data.max_length,
      tokens_per_batch=8_192))
  config.train.init_from = source
  config.optimizer.update(dict(schedule='constant', learning_rate=3e-5,
                               warmup_steps=0, b1=0.9, b2=0.95,
                               weight_decay=0.1, grad_clip_norm=1.0))
  config.train.update(dict(num_steps=int(args.get('steps', 20)), log_every=1,
                           eval_every=5, checkpoint_every=5,
                           keep_checkpoints=2, eval_at_start=True))
  config.eval.update(dict(prompts=('',), max_new_tokens=40))
  if 'runlocal' in args:
    config.data.update(dict(tokens_per_batch=128, eval_rows=4))
    config.train.update(dict(num_steps=int(args.get('steps', 4)),
                             eval_every=2, checkpoint_every=2))
    config.eval.max_new_tokens = 4
  return config
