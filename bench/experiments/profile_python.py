"""Small checkpoint, 1 torch thread: samples one stack process with py-spy (raw folded stacks, 15 s at
200 Hz) during a load of 4 x concurrency MT-Bench prompts. Args: concurrency inflight executor|scheduler out_file."""
import subprocess
import sys
import time

from client.bench.load import run_load
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack

conc = int(sys.argv[1]); inflight = sys.argv[2]; which = sys.argv[3]; out = sys.argv[4]
model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
prompts = load_mtbench_first_turns()
with LocalStack(model, ["--num-threads", "1"], ["--max-inflight-steps", inflight]) as stack:
    run_load(stack.address, prompts[:2], 2, 16)
    pid = {"executor": stack.executor.process.pid, "scheduler": stack.scheduler.process.pid}[which]
    p = subprocess.Popen(["py-spy", "record", "-p", str(pid), "-d", "15", "-r", "200", "-f", "raw", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    r = run_load(stack.address, [prompts[i % len(prompts)] for i in range(4 * conc)], conc, 256)
    p.wait()
