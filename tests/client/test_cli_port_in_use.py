"""A service told to listen on a port that is taken exits 1 with one line naming the flag and the address,
and stops what it had already started (no traceback, no noise from servers left to the interpreter's exit)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.stack


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], capture_output=True, text=True, timeout=180)


def assert_one_clean_error(result: subprocess.CompletedProcess, line: str) -> None:
    assert result.returncode == 1, result
    assert line in result.stderr, result.stderr
    for noise in ("Traceback", "sys.excepthook", "was never awaited"):
        assert noise not in result.stderr, result.stderr


def test_an_executor_on_a_taken_port(tiny_model_dir, taken_port):
    result = run_cli("executor", "--model", str(tiny_model_dir), "--port", str(taken_port))
    assert_one_clean_error(result, f"error: port: cannot listen on 127.0.0.1:{taken_port} ")


def test_an_executor_with_its_metrics_on_a_taken_port(tiny_model_dir, taken_port):
    result = run_cli("executor", "--model", str(tiny_model_dir), "--port", "0", "--metrics-port", str(taken_port))
    assert_one_clean_error(result, f"error: metrics_port: cannot listen on 127.0.0.1:{taken_port} ")


def test_serve_with_the_http_port_taken(tiny_model_dir, taken_port):
    result = run_cli("serve", "--model", str(tiny_model_dir), "--port", "0", "--spec-method", "none",
                     "--http-port", str(taken_port))
    assert_one_clean_error(result, "error: scheduler did not start (exit 1):")
    assert f"error: http_port: cannot listen on 127.0.0.1:{taken_port} " in result.stderr
