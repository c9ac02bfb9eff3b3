"""Small checkpoint, 1 torch thread: counts one stack process's system calls (strace -c -f) during a load of
2 x concurrency MT-Bench prompts (128 tokens). Args: concurrency inflight executor|scheduler|client out_file."""
import os
import signal
import subprocess
import sys
import time

from client import Client
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
    pid = {"executor": stack.executor.process.pid, "scheduler": stack.scheduler.process.pid, "client": os.getpid()}[which]
    st = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    with Client(stack.address) as c:
        before = c.model_info().stats
        r = run_load(stack.address, [prompts[i % len(prompts)] for i in range(2 * conc)], conc, 128)
        after = c.model_info().stats
    st.send_signal(signal.SIGINT); st.wait()
    print("steps", after.steps - before.steps, "wall", r.wall_s)
