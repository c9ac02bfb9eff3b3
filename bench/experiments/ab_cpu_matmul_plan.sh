#!/usr/bin/env bash
# A/B of the CPU matmul choice: REV_A (a checkout before per-shape timed plans) vs the working tree, `stepahead bench`
# at c=1 and c=16 (default model, the default speculation, one step ahead, 16 MT-Bench first turns, 64 tokens), ROUNDS
# alternating rounds; prints tok/s, ITL p50 and ITL over the bare forward (each variant's own) per run.
#   bash bench/experiments/ab_cpu_matmul_plan.sh DIR_A ROUNDS OUT
set -euo pipefail
dir_a=$1 rounds=$2 out=$3
dir_b=$(pwd)
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  order="a b"; [ $((round % 2)) -eq 0 ] && order="b a"
  for variant in $order; do
    dir=$dir_a; [ "$variant" = b ] && dir=$dir_b
    (cd "$dir" && PYTHONPATH="$dir" python3 -m client.cli bench --concurrency 1 16 --num-prompts 16 --max-tokens 64 \
      --max-inflight-steps 2 --no-hf --out "$out/$variant-$round" > "$out/$variant-$round.log" 2>&1)
    python3 - "$out/$variant-$round" "$variant" "$round" <<'PY'
import glob, json, sys
report = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
for run in report["runs"]:
    tag = f"c={run['concurrency']} "
    ratios = {key: round(value, 3) for key, value in report["ratios"].items() if tag in key}
    print(f"{sys.argv[2]} round {sys.argv[3]} {tag}{run['throughput_tok_s']:.1f} tok/s, ITL p50 {run['itl_ms_p50']:.1f} ms,"
          f" {ratios}", flush=True)
PY
  done
done
