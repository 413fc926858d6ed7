r"""Visual question answering on generated scenes with ViLBERT: questions
about colour, shape, count, relative position and existence, answers drawn
first so that the question alone gives nothing away.

    python -m transformer.main --config=experiments/vilbert_offline.py \
        --workdir=workdirs/vilbert
    python -m transformer.main --config=experiments/vilbert_vqa.py \
        --config.train.init_from=workdirs/vilbert --workdir=workdirs/vqa

Without init_from the model starts from scratch; `blind` trains the
question-only model (no image regions); `runlocal` is a seconds-long
variant for tests. Sizes and data settings match vilbert_offline.py, so a
pretraining workdir loads.
"""

from transformer import configs
from transformer.tasks import visual_question_answering


def get_config(arg: str = ''):
  args = configs.parse_args(arg, name='experiments/vilbert_vqa.py',
                            known=('blind', 'runlocal'))
  config = visual_question_answering.default_config()
  config.data.blind = 'blind' in args
  config.model.update(dict(size='small', dropout_rate=0.1,
                           attention_dropout_rate=0.1))
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  if 'runlocal' in args:
    config.data.update(dict(num_train=40, num_eval=10, image_size=16,
                            patch_size=8, batch_size=8, eval_batch_size=8))
    config.model.update(dict(size='tiny', dropout_rate=0.0,
                             attention_dropout_rate=0.0))
    config.eval.num_plots = 1
    config.optimizer.update(dict(warmup_steps=2))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=3))
  return config
