"""Tests of client/subprocess_runner.py."""

from __future__ import annotations

import sys

import pytest

from client.subprocess_runner import run_checked


def test_success_forwards_stdout_and_stderr_to_our_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = "import sys; print('to stdout'); sys.stderr.write('é 50%\\r100%\\n')"
    run_checked([sys.executable, "-c", script], "demo")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "to stdout" in captured.err and "é 50%\r100%" in captured.err


def test_failure_quotes_the_last_lines() -> None:
    script = "import sys; sys.stderr.write('step 10%\\rstep 90%\\nerror: it broke\\n'); sys.exit(3)"
    with pytest.raises(RuntimeError) as raised:
        run_checked([sys.executable, "-c", script], "doing the thing")
    summary = str(raised.value).split("command:")[0]
    assert summary.startswith("doing the thing failed (exit code 3)")
    assert "error: it broke" in summary
    assert "step 90%" in summary and "step 10%" not in summary
