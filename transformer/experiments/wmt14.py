r"""WMT 2014 with the settings of "Attention Is All You Need" (Vaswani et al.).

    python -m transformer.main --config=experiments/wmt14.py:ende_base \
        --workdir=workdirs/wmt14_ende_base
    # variants: ende_base, ende_big, enfr_big

Data: TFDS wmt14_translate (de-en, fr-en), prepared beforehand (no network
during training): `tfds build wmt14_translate/de-en --data_dir=DIR` and
`--config.data.tfds_data_dir=DIR`. Shared SentencePiece vocabulary (37,000
for EN-DE, 32,000 for EN-FR as in the paper), batches of about 25,000 source
and 25,000 target tokens, Adam(0.9, 0.98, 1e-9), warmup 4,000, label
smoothing 0.1, beam 4, length penalty 0.6, maximum output length input + 50,
checkpoint averaging (last 5 for base, 20 for big).

Periodic evaluation uses newstest2013 ('validation', the paper's
development set). For newstest2014, evaluate the finished workdir on the test
split (rerunning a finished run only evaluates it):
`--config.data.eval_split=test`. `:ende_base,runlocal` is a seconds-long
variant for tests.

Paper (Table 2, newstest2014 BLEU): base EN-DE 27.3, big EN-DE 28.4,
big EN-FR 41.8. The paper trained base for 100,000 steps (12 hours) and big
for 300,000 steps (3.5 days) on 8 P100 GPUs. We have not run these here: no
WMT data or GPU time was available. Tokenised BLEU in the paper is not
directly comparable to the detokenised sacreBLEU this codebase reports.
"""

from transformer.models import encoder_decoder
from transformer.tasks import translation

VARIANTS = {
    # name: (language pair, size, steps, vocabulary, dropout, checkpoints
    #        averaged, checkpoint interval ~10 minutes of the paper's runs)
    'ende_base': ('de-en', 'en', 'de', 'base', 100_000, 37_000, 0.1, 5, 1_400),
    'ende_big': ('de-en', 'en', 'de', 'big', 300_000, 37_000, 0.3, 20, 600),
    'enfr_big': ('fr-en', 'en', 'fr', 'big', 300_000, 32_000, 0.1, 20, 600),
}


def get_config(arg: str = 'ende_base'):
  variant, _, runlocal = arg.partition(',')
  if variant not in VARIANTS or runlocal not in ('', 'runlocal'):
    raise ValueError(f'Unknown variant {arg!r}; choose one of '
                     f'{sorted(VARIANTS)}, optionally followed by ,runlocal.')
  pair, src, tgt, size, steps, vocab, dropout, average, every = VARIANTS[
      variant]
  config = translation.default_config()
  config.data.update(dict(
      source='tfds', tfds_name=f'wmt14_translate/{pair}', source_lang=src,
      target_lang=tgt, train_split='train', eval_split='validation',
      vocab_size=vocab, max_length=256, tokens_per_batch=25_000,
      eval_batch_size=128))
  config.model.update(dict(size=size, dropout_rate=dropout))
  d_model = encoder_decoder.SIZES[size]['d_model']
  config.optimizer.update(dict(learning_rate=d_model**-0.5,
                               warmup_steps=4_000))
  config.train.update(dict(num_steps=steps, log_every=100, eval_every=10_000,
                           checkpoint_every=every,
                           keep_checkpoints=max(average, 5)))
  config.eval.update(dict(beam_size=4, length_penalty=0.6,
                          max_length_offset=50, average_checkpoints=average,
                          num_bleu_examples=0))
  if runlocal:  # seconds on a CPU, e.g. with tfds.testing.mock_data
    config.data.update(dict(vocab_size=300, max_length=64,
                            tokens_per_batch=512, eval_batch_size=8))
    config.model.update(dict(size='tiny', dropout_rate=0.0))
    config.optimizer.update(dict(schedule='constant', learning_rate=3e-3))
    config.train.update(dict(num_steps=8, log_every=4, eval_every=8,
                             checkpoint_every=8, keep_checkpoints=1))
    config.eval.update(dict(beam_size=2, num_bleu_examples=4,
                            average_checkpoints=1, max_length_offset=5))
  return config
