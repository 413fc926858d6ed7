#!/usr/bin/env bash
# The GPU rows of the README's benchmark tables and the GPU-only tests, in
# one run from the repository root:
#
#   FLAX=/path/to/google-flax bash benchmarks/on_gpu.sh [OUT_DIR]
#
# FLAX (optional) is a google/flax checkout whose examples/lm1b and
# examples/wmt are the anchors of against_lm1b.py, against_wmt.py and
# decoding.py. Every step
# has its own time limit and the run a deadline (BUDGET seconds, default
# 540), so one slow step never hides the rows of the others; each benchmark
# prints its rows as they come. Logs: OUT_DIR/tests.log, OUT_DIR/bench.log.
set -u
mkdir -p "${1:-gpu_out}"
out=$(cd "${1:-gpu_out}" && pwd)
budget=${BUDGET:-540}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

source "$(dirname "${BASH_SOURCE[0]}")/deadline.sh"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
  --format=csv | tee "$out/bench.log"
python3 -c 'import jax, flax; print("jax", jax.__version__, "flax",
  flax.__version__, jax.devices())' | tee -a "$out/bench.log"

# Many test processes share the GPU: none may take 75% of its memory. The
# tests' programs are tiny, so XLA's autotuning of each one (most of their
# compile time on a GPU) buys nothing there; skipped where XLA knows the flag.
tests_xla=--xla_gpu_autotune_level=0
XLA_FLAGS=$tests_xla python3 -c 'import jax; jax.numpy.ones(1)' \
  >/dev/null 2>&1 || tests_xla=
# TESTS=all runs the whole suite (TESTS_LIMIT seconds, default 120 for the
# GPU-specific files alone); the GPU-only tests are in test_attention.py.
if [[ ${TESTS:-} == all ]]; then
  tests=(tests)
else
  tests=(tests/attention/test_attention.py tests/decoding/test_beam_slots.py
         tests/layers/test_layers.py tests/decoding/test_decoding.py)
fi
XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=$tests_xla step gpu-tests \
  "${TESTS_LIMIT:-120}" "$out/tests.log" python3 -m pytest \
  -p no:cacheprovider -q -n 8 -rs "${tests[@]}"

# Seen on an H200 (2026-11-26), most of each step compiling: gpt2-large
# unrolled about 100 s, scanned about 25 s; Transformer-base about 45 s;
# B/16 40 s; generation with gpt2-large about 80 s. The variants of one
# model run scanned (docs/benchmarks.md: the scanned gpt2-large step
# took 12 ms more than the unrolled, 295 against 283 ms, in two runs), so
# that each compiles in seconds.
cd benchmarks
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
log=$out/bench.log
gpt="--rows=8 --length=2048 --sizes=gpt2-large"
mpt="--rows=8 --length=2048 --sizes=mpt-1b --scan_layers"
# The step's row (time, MFU) and where its time goes, kernel by kernel.
step gpt-1b 170 "$log" python3 profile_step.py --size=gpt2-large --rows=8 \
  --length=2048 --top=40
# MPT-1B's shape (heads of 128): MosaicML reports about 42% MFU for it.
step mpt-1b 150 "$log" bash -c "
  python3 profile_step.py --size=mpt-1b --rows=8 --length=2048 \
    --scan_layers --dropout=0 --top=30
  python3 train_throughput.py $mpt --dropout=0 --remat=dots"
step gpt-1b-variants 150 "$log" bash -c "
  python3 train_throughput.py $gpt --scan_layers
  python3 train_throughput.py $gpt --scan_layers --dropout=0
  python3 train_throughput.py $gpt --scan_layers --prng_impl=rbg"
step mt 150 "$log" bash -c "
  python3 train_throughput.py --rows=96 --length=256 --sizes=base
  python3 train_throughput.py --rows=96 --length=256 --sizes=base \
    --packing=unpacked"
step vit 120 "$log" bash -c "
  python3 train_throughput.py --rows=256 --sizes=B/16
  python3 train_throughput.py --rows=256 --sizes=B/16 --pad_tokens_to=8"
step generation 90 "$log" python3 generation.py --sizes=gpt2-large \
  --batch_sizes=1 --prompt_length=512 --new_tokens=64 --repeats=2
# Batch-1 decoding ran at 19.5% of the bandwidth bound with hundreds of
# small kernels per token: the same with the decoding loop's body in CUDA
# graphs (XLA's command buffers, loops and conditionals included).
step generation-graphs 90 "$log" env XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE" \
  python3 generation.py --sizes=gpt2-large --batch_sizes=1 \
  --prompt_length=512 --new_tokens=64 --repeats=2
if [[ -n ${FLAX:-} ]]; then
  step decoding 120 "$log" python3 decoding.py --wmt="$FLAX/examples/wmt" \
    --dtype=bfloat16 --gpt_sizes=
  step lm1b 120 "$log" python3 against_lm1b.py \
    --lm1b="$FLAX/examples/lm1b" --dtype=bfloat16
  step wmt-step 120 "$log" python3 against_wmt.py \
    --wmt="$FLAX/examples/wmt" --rows=96 --length=256 --dtype=bfloat16
fi
# The MT step again with XLA's attention in place of cuDNN's, for comparison.
step mt-xla-attention 110 "$log" python3 train_throughput.py --rows=96 \
  --length=256 --sizes=base --attention=xla
