#!/usr/bin/env bash
# One device call on the lent GPU machine: install the kit, then the parts asked for, each with its own time
# limit inside the call's budget. Results are written under a work folder and packed into $OUT/results.tgz after
# every part (the device tool returns a limited number of files, and a part cut by the limit keeps the others').
#
#   run(command="bash bench/gpu/measure.sh 560 tests default", carry=[".gpu-kit"], timeout_s=580)
#
# Parts: tests (the GPU tests of `stepahead gpu-check`; 165 s on a fresh H200 on 2026-11-27), triton (one layer's
# attention time per backend), default | 1.7b | 8b | small | moe (`stepahead bench` on that model shape, sync and async,
# with the HF peers its acceptance asks for; the default shape ran 363 s and was not finished). Concurrencies and
# peers per shape as in client/gpu_check.py; override the concurrencies with CONCURRENCY="1 16".
# EXTRA="--stream-interval 1 4" (any bench flags) is appended to each bench command.
set -u
BUDGET=${1:-560}; shift
PARTS=${*:-tests default}
START=$(date +%s)
OUT=${OUT:-/tmp/out}
WORK=/tmp/measure-$START
mkdir -p "$OUT" "$WORK"
exec > >(tee "$WORK/session.log") 2>&1

elapsed() { echo $(( $(date +%s) - START )); }
pack() { tar czf "$OUT/results.tgz" -C "$WORK" . ; }
part() {  # part NAME SECONDS COMMAND...: COMMAND with a limit (at most what is left), its log under the work folder
  local name=$1 limit=$2; shift 2
  local remaining=$(( BUDGET - $(elapsed) - 10 ))
  (( limit > remaining )) && limit=$remaining
  if (( limit < 20 )); then echo "== $name: skipped, ${remaining}s left"; return; fi
  echo "== $name (limit ${limit}s, t=$(elapsed)s)"
  timeout -k 5 "$limit" "$@" > "$WORK/$name.log" 2>&1
  echo "== $name: exit $? at t=$(elapsed)s"
  grep -E "done:|passed|failed|error|Error" "$WORK/$name.log" | tail -n 30
  pack
}

KIT=.gpu-kit
# The kit's on-device.sh without its model writing (the bench makes its own weightless shapes; the random-weight
# HF test writes its own checkpoint): installs the wheels and the checkout, puts MT-Bench in the cache.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $KIT/whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 STEPAHEAD_TOKENIZER_DIR=$PWD/$KIT/tok
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > /dev/null
mkdir -p /root/.cache/stepahead/data && cp $KIT/mt_bench_questions.jsonl /root/.cache/stepahead/data/
{ nvidia-smi; python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > "$WORK/environment.txt" 2>&1
echo "installed at t=$(elapsed)s: $(tail -1 "$WORK/environment.txt")"

for p in $PARTS; do
  case $p in
    tests)
      mapfile -t tests < <(python3 -c "from client.gpu_check import GPU_TESTS; print('\n'.join(GPU_TESTS))")
      part gpu-tests 420 python3 -m pytest -q -p no:cacheprovider -rs --durations=20 "${tests[@]}" \
        --junitxml="$WORK/gpu-tests.xml" ;;
    triton)
      part triton-layer-time 40 python3 bench/experiments/triton_attention_gpu_check.py --batches 1,16,64 \
        --context 600 --splits auto,1 --iters 100 ;;
    default|1.7b|8b|small|moe)
      mapfile -t command < <(python3 -c "
from pathlib import Path; from client.gpu_check import _bench_command
print('\n'.join(_bench_command('$p', 128, Path('$WORK'))))")
      # A second --concurrency replaces the shape's (argparse keeps the last).
      [ -n "${CONCURRENCY:-}" ] && command+=(--concurrency $CONCURRENCY)
      # shellcheck disable=SC2086  # EXTRA is a list of flags
      part "bench-$p" 600 "${command[@]}" --model "$PWD/$KIT/tok" ${EXTRA:-} ;;
    *) echo "unknown part $p" ;;
  esac
done
echo "finished at t=$(elapsed)s"
pack
