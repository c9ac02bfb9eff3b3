"""Tensor parallelism through the whole stack: `stepahead executor --tensor-parallel-size 2` (two gloo
ranks, rank 0 serving) gives the outputs of one rank, running ahead, with draft-model and eagle_ngram
(n-gram and EAGLE-style) speculation (drafters replicated, drafting on both ranks) and with multi-step, with chunked
prefill and preemption forced. Killing one rank takes the group down within 2 s: its requests end
UNAVAILABLE (no executor comes back here), the other rank exits, and no KV block stays allocated. On the
default model (9 heads, 3 KV heads: split 6 + 3 / 2 + 1), two ranks keep HF's greedy output for 10
MT-Bench prompts, speculating with the shipped head (eagle_ngram)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from hf_reference import assert_matches_reference, generate, load_cases
from test_async_equivalence import assert_same_outputs, run, workload

from client import Client, UnavailableError

pytestmark = pytest.mark.stack

FORCED_EXECUTOR = ["--num-kv-blocks", "8", "--num-threads", "1"]
FORCED_SCHEDULER = ["--max-num-batched-tokens", "32", "--max-inflight-steps", "2"]
VARIANTS = {  # (executor flags, scheduler flags) added to the forced ones; multi_step runs on async's executors
    "async": ([], []),
    "multi_step": ([], ["--num-scheduler-steps", "4"]),
    "draft_model": (["--spec-method", "draft_model", "--num-spec-tokens", "3"], []),
    # Both replicated drafters of eagle_ngram (n-gram lookup where the context repeats, the head elsewhere) in one
    # variant: CI time is why eagle and ngram alone are not stacks of their own here.
    "eagle_ngram": (["--spec-method", "eagle_ngram", "--num-spec-tokens", "3"], []),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_ranks_give_the_outputs_of_one(variant, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir,
                                           launch_module_stack):
    extra_executor, extra_scheduler = VARIANTS[variant]
    executor_flags = [*FORCED_EXECUTOR, *extra_executor]
    if variant == "draft_model":
        executor_flags += ["--draft-model", str(tiny_draft_model_dir)]
    if variant.startswith("eagle"):
        executor_flags += ["--eagle-drafter", str(tiny_eagle_dir)]
    scheduler_flags = [*FORCED_SCHEDULER, *extra_scheduler]
    outputs = {}
    for size in (1, 2):
        stack = launch_module_stack.with_scheduler(
            tiny_model_dir, [*executor_flags, "--tensor-parallel-size", str(size)], scheduler_flags)
        outputs[size] = run(stack.address, workload())
        with Client(stack.address) as client:
            info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
        assert info.stats.num_preemptions > 0, info.stats
        if variant in ("draft_model", "eagle_ngram"):
            assert info.stats.spec_drafted > 0, info.stats
        if variant.startswith("eagle"):  # a head trained for this checkpoint: some drafts are right
            assert info.stats.spec_accepted > 0, info.stats
        if size == 2:
            assert len(psutil.Process(stack.executor.process.pid).children()) == 1  # rank 1
    assert_same_outputs(outputs[2], outputs[1])


def test_a_killed_rank_takes_the_group_down_and_its_requests_end_unavailable(tiny_model_dir, launch_stack):
    stack = launch_stack(tiny_model_dir, ["--tensor-parallel-size", "2", "--num-threads", "1"],
                         ["--executor-recovery-timeout-s", "3"])
    rank0 = psutil.Process(stack.executor.process.pid)
    (rank1,) = rank0.children()
    with Client(stack.address, timeout=60) as client:
        stream = client.generate_stream(token_ids=[5, 6, 7], max_tokens=400, ignore_eos=True)
        next(stream)
        rank1.kill()
        killed_at = time.monotonic()
        rank0.wait(timeout=10)
        assert time.monotonic() - killed_at < 2.0, "rank 0 outlived its group by more than 2 s"
        with pytest.raises(UnavailableError, match="executor-recovery-timeout-s 3"):
            list(stream)
        info = client.model_info()  # the scheduler still answers
        assert info.num_running == info.num_waiting == 0 and info.num_free_kv_blocks == info.num_kv_blocks


def test_the_other_ranks_exit_when_rank_0_is_killed(tiny_model_dir, launch_stack):
    stack = launch_stack(tiny_model_dir, ["--tensor-parallel-size", "2", "--num-threads", "1"], [])
    rank0 = psutil.Process(stack.executor.process.pid)
    (rank1,) = rank0.children()
    rank0.kill()
    killed_at = time.monotonic()
    wait_until_exited(rank1, timeout=10)
    assert time.monotonic() - killed_at < 2.0


def wait_until_exited(process: psutil.Process, timeout: float) -> None:
    """Return once `process` has exited. An orphan stays a zombie until the container's init reaps it
    (measured here: 1.2-1.5 s after its exit), which `Process.wait` would count as still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {process.pid} still running after {timeout} s")


@pytest.mark.slow
def test_two_ranks_keep_hf_output_on_the_default_model(launch_stack, default_model_dir):
    stack = launch_stack(default_model_dir, ["--tensor-parallel-size", "2", "--num-threads", "1"],
                         ["--max-inflight-steps", "2", "--num-spec-tokens", "3"])  # fixed K: no step profile
    cases = load_cases()[:10]  # the single-rank stack is checked on all 20 (test_default_model_vs_hf.py)
    with Client(stack.address) as client, ThreadPoolExecutor(len(cases)) as pool:
        outputs = list(pool.map(lambda case: generate(client, case), cases))
        info = client.model_info()
    assert len(cases) == 10
    for ours, case in zip(outputs, cases):
        assert_matches_reference(ours, case)
    assert info.num_free_kv_blocks == info.num_kv_blocks
    assert info.stats.spec_accepted > 0, info.stats  # auto: eagle_ngram with the shipped head
