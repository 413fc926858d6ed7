r"""Vaswani et al. 2017, "Attention Is All You Need", Table 3: variations
on the base Transformer, EN-DE, newstest2013 (development set).

    # The parameter column of every row at the paper's scale, no training:
    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table3.py \
        --workdir=workdirs/table3_paper --scale=paper --launch=collect
    # One sbatch line per row for a GPU cluster (then --launch=collect):
    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table3.py \
        --workdir=/shared/runs/table3 --scale=paper --launch=print
    # The reduced scale on one machine, base and the (A) rows:
    python -m transformer.tools.reproduce \
        --table=experiments/paper/vaswani2017_table3.py \
        --workdir=workdirs/table3_reduced --scale=reduced --rows=base,A

Scales:
  paper    experiments/wmt14.py:ende_base (WMT14 EN-DE, 37,000 shared
           SentencePiece tokens, 100K steps of ~25,000+25,000 tokens), each
           row evaluated on newstest2013 with beam 4, alpha 0.6, maximum
           length input + 50 and no checkpoint averaging, as Table 3 was;
           big starts from experiments/wmt14.py:ende_big.
  reduced  experiments/mt_local.py on Multi30k EN-DE (29,000 pairs; BLEU on
           val, the 1,014-pair development split), the 'small' base of
           N=3, d_model=256, d_ff=512, h=8 (d_k=d_v=32), dropout and label
           smoothing 0.1, 8,000 SentencePiece tokens, 3,000 steps of 4,096
           tokens (mt_local's measured schedule), max_length 64; two
           seeds per row (ROW and ROW.seed1), the table giving their mean
           +- standard deviation.

Reduced rows apply each paper row's change relative to the base:
  (A) h = 1, 4, 16, 32 with d_k = d_v = 256 / h (as the paper, D / h).
  (B) d_k = 8, 16 (1/4 and 1/2 of the base's 32, as 16 and 32 of 64),
      d_v = 32 unchanged.
  (C) N = 1, 2, 4 (1/3, 2/3, 4/3 of 3, as 2, 4, 8 of 6); d_model = 128, 512
      with h = 8 (d_k = d_v = 16, 64; as 256, 1024 with 32, 128); d_ff = 256,
      1024 (1/2 and 2x, as 1024, 4096 of 2048). Learning rate d_model^-0.5
      at both scales, as the paper's schedule.
  (D) P_drop and eps_ls as the paper (0.0, 0.2).
  (E) learned positional embeddings instead of sinusoids.
  big d_model 512, d_ff 1024, h 16 (2x each, as the paper), P_drop 0.3, 3x
      the base's steps (300K / 100K).

Measured at reduced scale with 1,000 steps per row (warmup 400) instead of
3,000, on a 2-core CPU shared with other work (--set=train.num_steps=1000,
optimizer.warmup_steps=400; dev = Multi30k val, beam 4; train time
excludes evaluation): registry table `pages_table3_reduced` (docs/results/,
shown in docs/reproducing.md).

One head is worse than eight in perplexity and BLEU, as in the paper (5.29
and 24.9 against 4.92 and 25.8); four heads are as good as eight here (the
paper: slightly worse, 5.00 and 25.5). Sixteen heads are worse here, where
they leave d_k = 16: the paper's h=32 row has that d_k and is worse too
(5.01, 25.4), its h=16 row (d_k = 32) is not. One seed per row and a short
schedule: the seed-to-seed spread is unknown, so differences of a few
tenths of BLEU may be noise. Times vary with the machine's other load.

Row (B) keeps d_v while shrinking d_k: `model.value_head_dim` sets d_v apart
from d_k (`head_dim`). Should a row set a field the config lacks, the
command reports it as not expressible instead of training something else.
"""

from transformer.data import downloads
from transformer.reproduce.specs import Column, Row, Scale

TITLE = ('Vaswani et al. 2017, Table 3: variations on the Transformer '
         '(EN-DE development set)')

SCALES = {
    'paper': Scale(
        config='experiments/wmt14.py:ende_base',
        about='the paper\'s setting: WMT14 EN-DE (experiments/wmt14.py), '
              'newstest2013, beam 4, alpha 0.6, no checkpoint averaging.',
        overrides={'eval.average_checkpoints': 1}),
    'reduced': Scale(
        config=('experiments/mt_local.py:path=' + downloads.local('multi30k')
                + ',src=en,tgt=de,eval=val'),
        about='Multi30k EN-DE on one machine (experiments/mt_local.py, '
              'N=3, d_model=256, d_ff=512, h=8 base; rows change it as the '
              'paper\'s rows change theirs, see the spec\'s docstring); '
              'BLEU on val (1,014 pairs), beam 4, alpha 0.6, no checkpoint '
              'averaging. Not the paper\'s numbers: compare the trends.',
        # The paper's base P_drop, whatever mt_local's own recipe is.
        overrides={'data.max_length': 64, 'train.num_steps': 3_000,
                   'model.dropout_rate': 0.1,
                   'eval.average_checkpoints': 1},
        # Rows differ by tenths of BLEU: two seeds give the spread.
        seeds=2),
}

COLUMNS = (
    Column('N', 'N', 'setting:N'),
    Column('d_model', 'd_model', 'setting:d_model'),
    Column('d_ff', 'd_ff', 'setting:d_ff'),
    Column('h', 'h', 'setting:h'),
    Column('d_k', 'd_k', 'setting:d_k'),
    Column('d_v', 'd_v', 'setting:d_v'),
    Column('P_drop', 'P_drop', 'setting:P_drop', digits=0),
    Column('eps_ls', 'eps_ls', 'setting:eps_ls', digits=0),
    Column('steps', 'train steps', 'setting:steps', paper=True),
    Column('ppl', 'PPL (dev)', 'metric:eval/perplexity', digits=2,
           paper=True),
    Column('bleu', 'BLEU (dev)', 'metric:eval/bleu', digits=2, paper=True),
    Column('params', 'params x10^6', 'params', digits=1, paper=True),
    Column('hours', 'train hours', 'hours', digits=2),
)


def _row(name, label, paper, reduced, ppl, bleu, params='', **kwargs):
  group = name.rstrip('0123456789')
  # As printed in the paper: 5.00, 26.0.
  return Row(name, group, label, {'paper': paper, 'reduced': reduced},
             dict(ppl=f'{ppl:.2f}', bleu=f'{bleu:.1f}', params=params),
             **kwargs)


def _width(d_model):
  return {'model.d_model': d_model, 'optimizer.learning_rate': d_model**-0.5}


ROWS = (
    Row('base', 'base', 'base', {'paper': {}, 'reduced': {}},
        dict(steps='100K', ppl=4.92, bleu=25.8, params=65)),
    _row('A1', '(A) h=1, d_k=d_v=512', {'model.num_heads': 1},
         {'model.num_heads': 1}, 5.29, 24.9),
    _row('A2', '(A) h=4, d_k=d_v=128', {'model.num_heads': 4},
         {'model.num_heads': 4}, 5.00, 25.5),
    _row('A3', '(A) h=16, d_k=d_v=32', {'model.num_heads': 16},
         {'model.num_heads': 16}, 4.91, 25.8),
    _row('A4', '(A) h=32, d_k=d_v=16', {'model.num_heads': 32},
         {'model.num_heads': 32}, 5.01, 25.4),
    _row('B1', '(B) d_k=16', {'model.head_dim': 16, 'model.value_head_dim': 64},
         {'model.head_dim': 8, 'model.value_head_dim': 32}, 5.16, 25.1, 58),
    _row('B2', '(B) d_k=32', {'model.head_dim': 32, 'model.value_head_dim': 64},
         {'model.head_dim': 16, 'model.value_head_dim': 32}, 5.01, 25.4, 60),
    _row('C1', '(C) N=2', {'model.num_layers': 2}, {'model.num_layers': 1},
         6.11, 23.7, 36),
    _row('C2', '(C) N=4', {'model.num_layers': 4}, {'model.num_layers': 2},
         5.19, 25.3, 50),
    _row('C3', '(C) N=8', {'model.num_layers': 8}, {'model.num_layers': 4},
         4.88, 25.5, 80),
    _row('C4', '(C) d_model=256, d_k=d_v=32', _width(256), _width(128),
         5.75, 24.5, 28),
    _row('C5', '(C) d_model=1024, d_k=d_v=128', _width(1024), _width(512),
         4.66, 26.0, 168),
    _row('C6', '(C) d_ff=1024', {'model.d_ff': 1024}, {'model.d_ff': 256},
         5.12, 25.4, 53),
    _row('C7', '(C) d_ff=4096', {'model.d_ff': 4096}, {'model.d_ff': 1024},
         4.75, 26.2, 90),
    _row('D1', '(D) P_drop=0.0', {'model.dropout_rate': 0.0},
         {'model.dropout_rate': 0.0}, 5.77, 24.6),
    _row('D2', '(D) P_drop=0.2', {'model.dropout_rate': 0.2},
         {'model.dropout_rate': 0.2}, 4.95, 25.5),
    _row('D3', '(D) eps_ls=0.0', {'train.label_smoothing': 0.0},
         {'train.label_smoothing': 0.0}, 4.67, 25.3),
    _row('D4', '(D) eps_ls=0.2', {'train.label_smoothing': 0.2},
         {'train.label_smoothing': 0.2}, 5.47, 25.7),
    _row('E1', '(E) positional embedding instead of sinusoids',
         {'model.positional_encoding': 'learned'},
         {'model.positional_encoding': 'learned'}, 4.92, 25.7),
    Row('big', 'big', 'big',
        {'paper': {},
         'reduced': {**_width(512), 'model.num_heads': 16, 'model.d_ff': 1024,
                     'model.dropout_rate': 0.3, 'train.num_steps': 9_000}},
        dict(steps='300K', ppl=4.33, bleu=26.4, params=213),
        configs={'paper': 'experiments/wmt14.py:ende_big'}),
)

NOTES = """\
Paper: perplexities are per wordpiece on newstest2013 and must not be
compared with per-word ones; dev BLEU is without checkpoint averaging (beam
4, alpha 0.6), tokenised BLEU. Ours: perplexity exp(mean NLL) per
SentencePiece target token (EOS included) of the eval split, detokenised
sacreBLEU (13a) of beam-4 translations of the whole eval split. Blank paper
cells are blank in the paper (same as base). Parameters assume one shared
source/target vocabulary whose embedding is also the softmax weight (tied),
as the paper's, at 37,000 tokens (paper scale). Ours are exact; the
paper's are rounded, and its exact vocabulary size is not given: our base
has 63.1M against 65M, the base-derived rows are 1.2M to 4.1M below the
paper's figures, big is 1.2M above. Learned positions (E) add two tables of
max_length x d_model. Row (B) shrinks d_k alone (d_v stays, set by
model.value_head_dim)."""
