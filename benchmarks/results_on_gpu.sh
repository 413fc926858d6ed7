#!/usr/bin/env bash
# The training runs behind the README's GPU results, in one call from the
# repository root on a machine with one large GPU:
#
#   DATA=/path/to/shared/data BUDGET=540 bash benchmarks/results_on_gpu.sh OUT_DIR
#
# DATA holds multi30k/ (and the other folders of ../shared/data); it is
# linked as ../shared/data, where the experiments read by default. Steps,
# each under its own limit inside the BUDGET seconds (default 540):
#   table3     Vaswani et al. Table 3 at the reduced scale, every row with
#              the scale's 2 seeds, 8 rows side by side (reproduce
#              --parallel=8); rows finished in an earlier call on the same
#              machine are read, not trained again.
#   multi30k   de-en with the README's command, seeds 0 and 1 side by side
#              (8,000 steps; a deadline stops them at a checkpoint and the
#              next call on the same machine resumes them).
# What comes back: OUT_DIR/results.log, the table (table.md, table.csv)
# and OUT_DIR/workdirs.tgz, every run's events, config and logs without
# checkpoints (enough for `reproduce --launch=collect` and the curves).
set -u
out=$(mkdir -p "${1:-gpu_out}" && cd "${1:-gpu_out}" && pwd)
budget=${BUDGET:-540}
log=$out/results.log
export PYTHONUNBUFFERED=1
if [[ -n ${DATA:-} && ! -e ../shared/data ]]; then
  mkdir -p ../shared && ln -s "$(cd "$DATA" && pwd)" ../shared/data
fi

source "$(dirname "${BASH_SOURCE[0]}")/deadline.sh"

nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$log"
table3="--table=experiments/paper/vaswani2017_table3.py
  --workdir=workdirs/table3_reduced --scale=reduced"
step table3 360 "$log" python3 -m transformer.tools.reproduce $table3 --parallel=8
# The table as far as it got (a deadline stops the rows before they write it).
step table3-collect 60 "$log" python3 -m transformer.tools.reproduce $table3 \
  --launch=collect
multi30k() {
  local seed=$1
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.4 python3 -m transformer.main \
    --workdir=workdirs/multi30k_de_en.seed$seed \
    --config=experiments/mt_local.py:path=../shared/data/multi30k,src=de,tgt=en,eval=test_2016_flickr \
    --config.seed="$seed" > "$out/multi30k.seed$seed.log" 2>&1
  echo "multi30k seed $seed: exit $?"
}
export -f multi30k
export out
step multi30k 300 "$log" bash -c 'multi30k 0 & multi30k 1 & wait
  grep -h "Final\|BLEU\|bleu" "$out"/multi30k.seed*.log | tail -8'
cp workdirs/table3_reduced/table.md workdirs/table3_reduced/table.csv \
  "$out/" 2>/dev/null
tar czf "$out/workdirs.tgz" --exclude=checkpoints --exclude=cache \
  workdirs/table3_reduced workdirs/multi30k_de_en.seed* 2>/dev/null
ls -la "$out" | tee -a "$log"
