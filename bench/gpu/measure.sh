#!/usr/bin/env bash
# One device call on the lent GPU machine: install the kit, run the GPU tests, time the Triton attention
# kernel per layer call, benchmark the default-model shape against HF, and profile the executor with py-spy.
# Every part has its own time limit inside the call's budget and writes under $OUT as it goes, so a part
# that fails or runs long leaves the others' results.
#
#   run(command="bash bench/gpu/measure.sh 560", carry=[".gpu-kit"], timeout_s=580)
#
# Arguments: the seconds this script may use in all (default 560), then the bench concurrencies (default "1 16 64").
set -u
BUDGET=${1:-560}
CONCURRENCY=${2:-1 16 64}
START=$(date +%s)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
part() {  # part NAME SECONDS COMMAND...: runs COMMAND with a limit (at most what is left), logs under $OUT
  local name=$1 limit=$2; shift 2
  local remaining; remaining=$(( $(left) - 5 ))
  (( limit > remaining )) && limit=$remaining
  if (( limit < 10 )); then echo "== $name: skipped, ${remaining}s left"; return; fi
  echo "== $name (limit ${limit}s, t=$(( $(date +%s) - START ))s)"
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? after $(( $(date +%s) - START ))s"
  tail -n 25 "$OUT/$name.log"
}

KIT=.gpu-kit
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $KIT/whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > /dev/null
mkdir -p /root/.cache/stepahead/data && cp $KIT/mt_bench_questions.jsonl /root/.cache/stepahead/data/

echo "installed after $(( $(date +%s) - START ))s"
{ nvidia-smi; python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt" | tail -3

part gpu-tests 120 python3 -m pytest -q -p no:cacheprovider -rs --durations=15 \
  tests/executor_svc/cuda_graphs/test_cuda_replay.py tests/executor_svc/test_triton_attention.py \
  --junitxml="$OUT/gpu-tests.xml"
part triton-layer-time 40 python3 bench/experiments/triton_attention_gpu_check.py --batches 1,16,64 --context 600 \
  --splits auto,1 --iters 100

# py-spy of the executor while the bench runs: 12 s at c=1, later 12 s at whatever runs then.
(
  for i in 1 2; do
    pid=""
    for _ in $(seq 200); do pid=$(pgrep -f "client.cli executor" | head -1); [ -n "$pid" ] && break; sleep 1; done
    [ -z "$pid" ] && break
    sleep $(( i == 1 ? 25 : 60 ))
    py-spy record --pid "$pid" --duration 12 --rate 200 --nonblocking --format raw \
      --output "$OUT/executor-pyspy-$i.txt" > "$OUT/pyspy-$i.log" 2>&1
  done
) &

# --model-shape default: random weights of SmolLM2-135M's shape with its tokenizer (bf16).
part bench-default $(( $(left) - 10 )) python3 -m client.cli bench --device cuda --dtype bfloat16 \
  --max-tokens 128 --ignore-eos --max-inflight-steps 1 2 --concurrency $CONCURRENCY \
  --model .gpu-kit/tok --model-shape default --out "$OUT/bench-default" --num-threads 4 --kv-cache-memory-gb 8
grep -h "done:" "$OUT/bench-default.log"
echo "finished after $(( $(date +%s) - START ))s"
