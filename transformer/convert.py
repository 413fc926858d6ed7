"""Turns a published checkpoint into a workdir of this codebase.

    python -m transformer.convert --from=hf --input=DIR --output=WORKDIR
    python -m transformer.convert --from=vit_npz --input=ViT-B_16.npz \
        --output=WORKDIR [--image_size=384]

Writes the experiment config (config.json), the class names (dataset.json)
and an orbax checkpoint at step 0, so that `python -m transformer.predict
--workdir=WORKDIR` classifies images with it and an experiment with
`--config.train.init_from=WORKDIR` fine-tunes it (at another resolution or
on other classes, as `image_classification.adapt_pretrained` allows).
Hugging Face directories: ViT (`google/vit-*`); GPT-2 loads with
`interop.gpt2.load` but has no workdir yet (it needs its BPE tokenizer).
"""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from transformer import checkpoints
from transformer import commands
from transformer import sharding
from transformer import train
from transformer.interop import vit as vit_interop
from transformer.tasks import image_classification

_FROM = flags.DEFINE_enum('from', None, ['hf', 'vit_npz'],
                          'Checkpoint format.')
_INPUT = flags.DEFINE_string('input', None, 'Hugging Face directory or .npz.')
_OUTPUT = flags.DEFINE_string('output', None, 'The workdir to write.')
_IMAGE_SIZE = flags.DEFINE_integer(
    'image_size', None, 'vit_npz: resample the positions to this size.')


def vit_experiment(config):
  """The image-classification config of a converted ViT."""
  experiment = image_classification.default_config()
  experiment.data.update(dict(image_size=config.image_size, crop='none',
                              flip=False))
  experiment.model.update(dict(
      size=f'Ti/{config.patch_size}', num_layers=config.num_layers,
      d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
      dropout_rate=config.dropout_rate, pooling=config.pooling,
      positional_encoding=config.positional_encoding,
      patch_embedding=config.patch_embedding, activation=config.activation,
      layer_norm_epsilon=config.layer_norm_epsilon))
  return experiment


def write_workdir(workdir: str, experiment, params, class_names) -> None:
  """config.json, dataset.json and checkpoint 0 (the optimizer state of the
  experiment's optimizer, freshly initialised)."""
  if checkpoints.exist(workdir):
    raise ValueError(f'{workdir} already has checkpoints; convert into a new '
                     f'--output.')
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, image_classification.DATASET_FILE),
            'w') as f:
    json.dump({'classes': list(class_names), 'channels': 3}, f)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(experiment.to_json_best_effort(indent=2))
  trainer = train.Trainer(experiment, workdir)
  with sharding.active(trainer.mesh, trainer.rules):
    state = trainer.initialise()
    converted = jax.tree.map(
        lambda new, old: jax.device_put(jnp.asarray(new, old.dtype),
                                        old.sharding), params, state.params)
  mngr = checkpoints.manager(workdir)
  checkpoints.save(mngr, 0, converted, state.opt_state)
  mngr.wait_until_finished()
  mngr.close()


@commands.user_errors_exit
def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for flag in (_FROM, _INPUT, _OUTPUT):
    if flag.value is None:
      raise app.UsageError(f'Give --{flag.name}.')
  if _FROM.value == 'vit_npz':
    config, params = vit_interop.load_npz(_INPUT.value, _IMAGE_SIZE.value)
    class_names = [f'class_{i}' for i in range(config.num_classes)]
  else:
    with open(os.path.join(_INPUT.value, 'config.json')) as f:
      hf = json.load(f)
    if hf.get('model_type') != 'vit':
      raise app.UsageError(
          f"model_type={hf.get('model_type')!r}: workdirs are written for "
          f"'vit' checkpoints so far (interop.gpt2.load reads GPT-2).")
    config, params = vit_interop.load(_INPUT.value)
    labels = hf.get('id2label') or {}
    class_names = [labels.get(str(i), f'class_{i}')
                   for i in range(config.num_classes)]
  write_workdir(_OUTPUT.value, vit_experiment(config), params, class_names)
  print(f'Wrote {_OUTPUT.value}: {config.num_layers} layers, width '
        f'{config.d_model}, {config.image_size}x{config.image_size} images, '
        f'{config.num_classes} classes.')


if __name__ == '__main__':
  app.run(main)
