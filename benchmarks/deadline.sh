# Sourced by the GPU scripts (on_gpu.sh, results_on_gpu.sh): `step`, one
# command under its own time limit and the run's deadline (`budget`
# seconds from the script's start), so that one slow step never hides the
# output of the others.

step() {  # step NAME LIMIT_S LOG COMMAND...
  local name=$1 limit=$2 log=$3 left=$((budget - SECONDS))
  shift 3
  if (( left < 20 )); then
    echo "== $name: not run, the deadline is reached" | tee -a "$log"
    return
  fi
  (( limit < left )) || limit=$left
  echo "== $name (limit ${limit} s, at ${SECONDS} s): $*" | tee -a "$log"
  timeout "$limit" "$@" 2>&1 | grep -v "Unable to initialize backend" \
    | tee -a "$log"
  echo "== $name: exit ${PIPESTATUS[0]} at ${SECONDS} s" | tee -a "$log"
}
