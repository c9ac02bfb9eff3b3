"""`stepahead serve` reports its start-up phases on stderr, in order, before its serving line on stdout (which
stays alone there); a step profile it has to measure is a phase of its own; Ctrl-C while it starts stops it."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psutil
import pytest
from cpu_share import executor_threads
from serve_process import environment_without_flag_variables

from client.launcher import ServiceProcess

pytestmark = pytest.mark.stack
SERVING_LINE = r"stepahead serving \S+ on (\S+)"
SECONDS = r"\(\d+\.\d s\)"


def serve_with_stderr_to(stderr: Path, model_dir: Path, profile_dir: Path) -> ServiceProcess:
    """`serve` of ``model_dir`` on ephemeral ports measuring a dynamic-K step profile into ``profile_dir``; its
    stdout is the ServiceProcess's output, its stderr goes to the file ``stderr``."""
    argv = ServiceProcess.cli_argv(
        "serve", "--model", str(model_dir), "--host", "127.0.0.1", "--port", "0",
        "--num-threads", executor_threads(), "--kv-cache-memory-gb", "0.02",
        "--spec-method", "ngram", "--num-spec-tokens", "dynamic", "--spec-profile-dir", str(profile_dir),
    )
    return ServiceProcess("serve", ["sh", "-c", 'exec "$@" 2>"$0"', str(stderr), *argv],
                          environment_without_flag_variables())


def expected_phases(model_dir: Path, profile_dir: Path) -> list[str]:
    """Patterns of the phase lines, in the order they come."""
    return [
        re.escape(f"starting the executor (loading {model_dir}) ..."),
        re.escape("starting the scheduler ..."),
        rf"executor ready on 127\.0\.0\.1:\d+ {SECONDS}",
        re.escape("scheduler: measuring the step profile for dynamic speculative decoding (once per model, "
                  "drafter and thread count; a minute or two; cached in ")
        + re.escape(str(profile_dir)) + r"/profile-[0-9a-f]{16}\.json\) \.\.\.",
        rf"scheduler: step profile ready {SECONDS}",
        rf"scheduler ready {SECONDS}",
    ]


def wait_for_line(path: Path, text: str, timeout_s: float) -> bool:
    """Whether a line containing ``text`` appears in the file at ``path`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.1)
    return False


def test_serve_reports_each_start_up_phase_on_stderr_before_serving(tiny_model_dir, tmp_path):
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    stderr = tmp_path / "stderr.txt"
    serve = serve_with_stderr_to(stderr, tiny_model_dir, profile_dir)
    try:
        serve.start(SERVING_LINE, timeout_s=120)
        progress = stderr.read_text().splitlines()  # written (and flushed) before the serving line
        stdout = serve.log().splitlines()
    finally:
        serve.stop()
    assert len(stdout) == 1 and re.match(SERVING_LINE, stdout[0]), stdout
    phases = expected_phases(tiny_model_dir, profile_dir)
    positions = [[index for index, line in enumerate(progress) if re.fullmatch(phase, line)] for phase in phases]
    assert all(len(found) == 1 for found in positions), (phases, progress)
    assert [found[0] for found in positions] == sorted(found[0] for found in positions), progress
    assert len(list(profile_dir.glob("profile-*.json"))) == 1


def test_ctrl_c_while_serve_starts_stops_it_and_its_services(tiny_model_dir, tmp_path):
    profile_dir = tmp_path / "profiles"
    stderr = tmp_path / "stderr.txt"
    serve = serve_with_stderr_to(stderr, tiny_model_dir, profile_dir)
    try:
        serve.launch()
        assert serve.process is not None
        assert wait_for_line(stderr, "scheduler: measuring the step profile", timeout_s=60), stderr.read_text()
        services = psutil.Process(serve.process.pid).children(recursive=True)
        assert len(services) >= 2, services
        serve.process.send_signal(signal.SIGINT)
        assert serve.process.wait(timeout=30) == 130, stderr.read_text()
        _, alive = psutil.wait_procs(services, timeout=10)
        assert alive == [], alive
    finally:
        serve.stop()
