"""py-spy profile of the scheduler against the emulated executor. PYTHONPATH=.:proto python3
bench/experiments/emulated_executor_profile.py [scheduler flags]; then python3 bench/experiments/fold_pyspy.py /tmp/sched.raw"""
import multiprocessing, subprocess, sys, time
sys.path[:0] = ["bench/experiments"]
from emulated_executor import serve, SCHEDULER_LISTENING
from client.launcher import ServiceProcess
from client.bench.load import run_load
from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns

flags = sys.argv[1:]
model = str(make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", resolve_model(None)))
prompts = load_mtbench_first_turns()
q = multiprocessing.Queue()
emu = multiprocessing.Process(target=serve, args=(q, 0.0008, 0.5e-3 / 15), daemon=True); emu.start()
addr = f"127.0.0.1:{q.get()}"
sched = ServiceProcess("scheduler", ServiceProcess.cli_argv("scheduler", "--model", model, "--executor", addr, "--port", "0", *flags))
server = sched.start(SCHEDULER_LISTENING, 120)
run_load(server, prompts[:4], 4, 16)
spy = subprocess.Popen(["py-spy", "record", "-p", str(sched.process.pid), "-r", "500", "-f", "raw", "-o", "/tmp/sched.raw", "-d", "12", "--nonblocking"])
time.sleep(0.5)
t = time.time(); load = run_load(server, prompts * 2, 16, 128); print("load s", time.time() - t)
spy.wait(); sched.stop(); emu.kill()
