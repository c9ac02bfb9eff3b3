#!/usr/bin/env bash
# Two EAGLE heads and no speculation, alternating, on fresh stacks: default model, eagle_ngram, dynamic K, c=1,
# NPROMPTS MT-Bench first turns, 128 tokens (bench/experiments/dynamic_k_trace/run.py). Each round rotates the order.
#   bash bench/experiments/eagle_head_ab.sh ROUNDS NEW_HEAD_DIR > LOG
set -u
ROUNDS=${1:-5}; NEW=$2
export NPROMPTS=${NPROMPTS:-16}
ERRORS=${ERRORS:-/tmp/eagle_head_ab.stderr}  # the stacks' own output; a run that printed no result says so
run() {  # run LABEL ROUND: one stack, one line of results
  local line
  line=$(case $1 in
    none) python3 bench/experiments/dynamic_k_trace/run.py none ;;
    shipped) python3 bench/experiments/dynamic_k_trace/run.py dynamic ;;
    new) EAGLE_DIR=$NEW python3 bench/experiments/dynamic_k_trace/run.py dynamic ;;
  esac 2>>"$ERRORS")
  echo "$1 round $2: ${line:-FAILED (see $ERRORS)}"
}
# Warm-up: each head's step profile is measured once and cached before the timed rounds.
NPROMPTS=1 run shipped warm; NPROMPTS=1 run new warm
orders=("none shipped new" "shipped new none" "new none shipped")
for ((r = 0; r < ROUNDS; r++)); do
  for label in ${orders[$((r % 3))]}; do run "$label" "$r"; done
done
