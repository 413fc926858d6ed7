r"""Vaswani et al. 2017, "Attention Is All You Need", Table 2: the BLEU of
the base and big models on newstest2014, with the paper's evaluation
protocol (checkpoint averaging, beam 4, alpha 0.6, maximum output length
input + 50).

    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table2.py \
        --workdir=/shared/runs/table2 --scale=paper --launch=print
    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table2.py \
        --workdir=workdirs/table2_reduced --scale=reduced --rows=base_ende

Protocol (section 6.1 of the paper): base models average the last 5
checkpoints, written at 10-minute intervals (experiments/wmt14.py writes one
every 1,400 steps, ~10 minutes of the paper's 12 hours for 100K steps); big
models the last 20 (every 600 of 300K steps). Beam 4, length penalty alpha
0.6, maximum output length input + 50, terminating early when possible.
Vocabularies: shared source-target BPE of about 37,000 tokens for EN-DE and
32,000 word-pieces for EN-FR (ours: SentencePiece of those sizes). Big
EN-FR used P_drop = 0.1 instead of 0.3 (experiments/wmt14.py:enfr_big).

The reduced scale is the Multi30k EN-DE base of vaswani2017_table3.py
(N=3, d_model=256) and its big (d_model 512, h 16, d_ff 1024, P_drop 0.3),
evaluated on test_2016_flickr; checkpoints every 42 steps (1.4% of the
3,000-step run, as 1,400 of 100K) and every 18 steps for big (0.2%, as 600
of 300K), averaging the last 5 and 20. Multi30k here has no French, so the
EN-FR rows have no reduced equivalent.
"""

from transformer.data import downloads
from transformer.reproduce.specs import Column, Row, Scale

TITLE = ('Vaswani et al. 2017, Table 2: BLEU on newstest2014 with checkpoint '
         'averaging')

_MULTI30K = ('experiments/mt_local.py:path=' + downloads.local('multi30k') +
             ',src=en,tgt=de')
_REDUCED_BIG = {'model.d_model': 512, 'optimizer.learning_rate': 512**-0.5,
                'model.num_heads': 16, 'model.d_ff': 1024,
                'model.dropout_rate': 0.3, 'train.num_steps': 9_000,
                'train.checkpoint_every': 18, 'eval.average_checkpoints': 20}

SCALES = {
    'paper': Scale(
        config='experiments/wmt14.py:ende_base',
        about='the paper\'s setting (experiments/wmt14.py): WMT14, '
              'newstest2014, beam 4, alpha 0.6, maximum output input + 50, '
              'last 5 (base) or 20 (big) checkpoints averaged.',
        overrides={'data.eval_split': 'test'}),
    'reduced': Scale(
        config=_MULTI30K + ',eval=test_2016_flickr',
        about='Multi30k EN-DE on one machine (experiments/mt_local.py, see '
              'the spec\'s docstring), test_2016_flickr, the paper\'s '
              'decoding and averaging. Not the paper\'s numbers.',
        # The paper's base P_drop, whatever mt_local's own recipe is.
        overrides={'data.max_length': 64, 'train.num_steps': 3_000,
                   'model.dropout_rate': 0.1,
                   'train.checkpoint_every': 42, 'train.keep_checkpoints': 20,
                   'eval.average_checkpoints': 5}),
}

COLUMNS = (
    Column('N', 'N', 'setting:N'),
    Column('d_model', 'd_model', 'setting:d_model'),
    Column('P_drop', 'P_drop', 'setting:P_drop', digits=0),
    Column('vocab', 'vocabulary', 'setting:vocab'),
    Column('steps', 'train steps', 'setting:steps', paper=True),
    Column('averaged', 'checkpoints averaged', 'setting:averaged',
           paper=True),
    Column('beam', 'beam', 'setting:beam'),
    Column('alpha', 'alpha', 'setting:alpha', digits=0),
    Column('max_output', 'max output', 'setting:max_output'),
    Column('bleu', 'BLEU (averaged)', 'metric:eval_averaged/bleu', paper=True),
    Column('bleu_last', 'BLEU (last checkpoint)', 'metric:eval/bleu'),
    Column('params', 'params x10^6', 'params', digits=1, paper=True),
    Column('hours', 'train hours', 'hours', digits=2),
)

ROWS = (
    Row('base_ende', 'base', 'Transformer (base model), EN-DE',
        {'paper': {}, 'reduced': {}},
        dict(steps='100K', averaged=5, bleu='27.3', params=65)),
    Row('big_ende', 'big', 'Transformer (big), EN-DE',
        {'paper': {}, 'reduced': _REDUCED_BIG},
        dict(steps='300K', averaged=20, bleu='28.4', params=213),
        configs={'paper': 'experiments/wmt14.py:ende_big'}),
    Row('base_enfr', 'base', 'Transformer (base model), EN-FR',
        {'paper': {'data.tfds_name': 'wmt14_translate/fr-en',
                   'data.target_lang': 'fr', 'data.vocab_size': 32_000}},
        dict(steps='100K', averaged=5, bleu='38.1')),
    Row('big_enfr', 'big', 'Transformer (big), EN-FR', {'paper': {}},
        dict(steps='300K', averaged=20, bleu='41.8'),
        configs={'paper': 'experiments/wmt14.py:enfr_big'}),
)

NOTES = """\
Paper: tokenised BLEU on newstest2014 (the paper's Table 2 also lists
training cost in FLOPs, not reproduced here). Ours: detokenised sacreBLEU
(13a), which is typically lower than tokenised BLEU on the same output, so
compare within a column, and the paper's figures only roughly. Parameters
are counted at each row's vocabulary (37,000 EN-DE, 32,000 EN-FR) with tied
embeddings; the paper gives 65M and 213M for base and big (Table 3)."""
