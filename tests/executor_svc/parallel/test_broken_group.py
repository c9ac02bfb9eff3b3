"""A broken tensor-parallel group ends rank 0 at the first failed job, not at the watcher's next look; a rank that dies
before the group has formed ends rank 0's wait for it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from executor_svc.model_runner import ModelRunner
from executor_svc.parallel import launch
from executor_svc.parallel.launch import RankGroup
from executor_svc.parallel.rank_commands import MirroringComputeLoop
from executor_svc.parallel.tensor_parallel import TensorParallel


class RecordingChannel:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, command: tuple) -> None:
        self.sent.append(command)


class PeerGoneRunner(ModelRunner):
    """A runner whose collectives fail as gloo's do when a peer rank was killed."""

    def __init__(self) -> None:  # no model: only the mirrored method's failure matters
        pass

    def reset(self) -> None:
        raise RuntimeError("gloo/transport/tcp/pair.cc: Read error: Connection reset by peer")


def run_on_loop(loop: MirroringComputeLoop, fn):
    worker = threading.Thread(target=loop.run_forever)
    worker.start()
    try:
        return loop.call(fn)
    finally:
        loop.stop()
        worker.join(timeout=10)


def test_a_failed_mirrored_job_asks_the_group_first_then_raises():
    failures: list[str] = []
    loop = MirroringComputeLoop(RecordingChannel(), lambda: failures.append("checked"))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="Connection reset by peer"):
        run_on_loop(loop, PeerGoneRunner().reset)
    assert failures == ["checked"]
    assert loop.channel.sent == [("runner", "reset", ()), ("stop",)]  # the job went out first; stop at the end


def test_jobs_that_succeed_or_touch_no_runner_do_not_ask():
    failures: list[str] = []
    loop = MirroringComputeLoop(RecordingChannel(), lambda: failures.append("checked"))  # type: ignore[arg-type]
    assert run_on_loop(loop, lambda: 7) == 7
    assert failures == []


@pytest.fixture
def exits(monkeypatch) -> list[int]:
    codes: list[int] = []
    monkeypatch.setattr(launch.os, "_exit", codes.append)
    return codes


def exited_child() -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child


def test_exit_if_broken_exits_when_a_started_rank_is_gone(exits):
    group = RankGroup(TensorParallel(0, 2), [exited_child()])
    group._broken = (lambda: any(c.poll() is not None for c in group.children), "a rank exited")
    group.exit_if_broken()
    assert exits == [1]


def test_exit_if_broken_stays_while_the_group_is_whole_or_stopping(exits):
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        group = RankGroup(TensorParallel(0, 2), [running])
        group._broken = (lambda: any(c.poll() is not None for c in group.children), "a rank exited")
        group.exit_if_broken()
        assert exits == []
        running.kill()
        running.wait(timeout=10)
        group.stop_watching()  # a clean shutdown: ranks exiting are expected
        group.exit_if_broken()
        assert exits == []
    finally:
        running.kill()
        running.wait(timeout=10)
    assert RankGroup(TensorParallel(), []).exit_if_broken() is None  # no group: nothing to watch


RANK_1_DIES_AT_START = """
import os, sys
if os.environ.get("RANK") == "1":
    sys.exit(3)
from executor_svc.parallel.launch import join_tensor_parallel_group
join_tensor_parallel_group(2, "cpu")
print("joined")
"""


def test_rank_0_does_not_wait_for_a_rank_that_died_before_the_group_formed():
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-c", RANK_1_DIES_AT_START], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 1 and "joined" not in done.stdout
    assert "tensor-parallel group lost: a rank exited" in done.stderr
