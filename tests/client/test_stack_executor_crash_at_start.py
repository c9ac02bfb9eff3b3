"""An executor that crashes after binding its port (loading broken weights) fails the stack's start at once with its
log, instead of leaving `stepahead serve` waiting for it until the start timeout."""

from __future__ import annotations

import shutil
import time

import pytest

from client.launcher import ServiceStartError
from client.stack import LocalStack

pytestmark = pytest.mark.stack


def test_an_executor_crashing_while_loading_fails_the_start_at_once_naming_it(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    stack = LocalStack(str(broken))
    started = time.monotonic()
    with pytest.raises(ServiceStartError, match=r"executor exited \(code \d+\) before the scheduler was serving"):
        stack.start(timeout_s=120)
    assert time.monotonic() - started < 60  # not the start timeout
    assert stack.scheduler is None or not stack.scheduler.is_running()
    assert all(not executor.is_running() for executor in stack.executors)
