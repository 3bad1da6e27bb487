#!/usr/bin/env bash
# Runs `npm test` several times in a row while CPU-bound busy loops take every
# core, to show that no test depends on the machine's speed. Reports each
# run's result and the counts; exits 0 only when every run passed.
#
#   bash scripts/stress-test.sh [RUNS]        # default 5 runs
#
# Settings (environment):
#   STRESS_RUNS        runs of npm test (default 5; the first argument wins)
#   STRESS_LOAD        busy loops to start (default: one per core, nproc)
#   STRESS_LOG_DIR     where each run's output goes (default: a new temp dir)
#   STRESS_MAX_SECONDS a busy loop ends by itself after this long, should this
#                      script be killed before it can stop them (default 14400)
set -uo pipefail
cd "$(dirname "$0")/.."

runs="${1:-${STRESS_RUNS:-5}}"
load="${STRESS_LOAD:-$(nproc)}"
max_seconds="${STRESS_MAX_SECONDS:-14400}"
log_dir="${STRESS_LOG_DIR:-$(mktemp -d -t windlass-stress.XXXXXX)}"
mkdir -p "$log_dir"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ && "$load" =~ ^[0-9]+$ && "$max_seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "stress-test: RUNS, STRESS_LOAD and STRESS_MAX_SECONDS must be whole numbers" >&2
  exit 2
fi

# shellcheck source=use-node.sh
source scripts/use-node.sh

load_pids=()
stop_load() {
  for pid in "${load_pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${load_pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  load_pids=()
}
trap stop_load EXIT
trap 'exit 130' INT TERM

# One busy loop per core, at the tests' own priority: `yes` spends all its
# time writing to /dev/null. `timeout` bounds each one and passes our kill on.
for ((i = 0; i < load; i++)); do
  timeout "$max_seconds" yes >/dev/null &
  load_pids+=("$!")
done
echo "stress-test: $load busy loops running (pids ${load_pids[*]:-none}); $runs runs of npm test; logs in $log_dir"

passed=0
failed=0
for ((run = 1; run <= runs; run++)); do
  log="$log_dir/run-$run.log"
  started=$(date +%s)
  if npm test >"$log" 2>&1; then
    passed=$((passed + 1))
    result="passed"
  else
    failed=$((failed + 1))
    result="FAILED"
  fi
  echo "stress-test: run $run/$runs $result in $(($(date +%s) - started)) s ($log)"
  if [[ "$result" == FAILED ]]; then
    grep -E "FAIL|×|failed|Error" "$log" | head -n 20 | sed 's/^/  /'
  fi
done

stop_load
echo "stress-test: $passed passed, $failed failed of $runs runs of npm test under $load busy loops"
[[ "$failed" -eq 0 ]]
