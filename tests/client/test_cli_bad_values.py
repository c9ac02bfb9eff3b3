"""`stepahead generate` refuses a value the request cannot carry before sending anything, naming the option
(the server address is unreachable: nothing may be sent)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("flags, field", [(["--seed", "-5"], "seed"), (["--temperature", "nan"], "temperature")])
def test_generate_names_the_bad_option_and_exits_2(flags, field):
    argv = [sys.executable, "-m", "client.cli", "generate", "hi", "--server", "127.0.0.1:1", *flags]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert f"error: {field}: " in result.stderr, result.stderr


@pytest.mark.parametrize("argv, option, reason", [
    (["bench", "--concurrency", "1", "0"], "--concurrency", "must be >= 1, got 0"),
    (["bench", "--max-tokens", "0"], "--max-tokens", "must be >= 1, got 0"),
    (["bench", "--num-prompts", "-1"], "--num-prompts", "must be >= 1, got -1"),
    (["bench", "--sweep-max-k", "0"], "--sweep-max-k", "must be >= 1, got 0"),
    (["bench", "--rounds", "0"], "--rounds", "must be >= 1, got 0"),
    (["soak", "--minutes", "-1"], "--minutes", "must be a finite number > 0, got -1"),
    (["soak", "--minutes", "nan"], "--minutes", "must be a finite number > 0, got nan"),
    (["soak", "--minutes", "1", "--concurrency", "0"], "--concurrency", "must be >= 1, got 0"),
    (["soak", "--minutes", "1", "--kill-executor-every-s", "0"], "--kill-executor-every-s", "must be a finite"),
    (["profile", "--out", "p.json", "--max-num-seqs", "0"], "--max-num-seqs", "must be >= 1, got 0"),
    (["serve", "--executor-groups", "0"], "--executor-groups", "must be >= 1, got 0"),
    (["serve", "--executor-max-restarts", "-1"], "--executor-max-restarts", "must be >= 0, got -1"),
    (["serve", "--scheduler-max-restarts", "-1"], "--scheduler-max-restarts", "must be >= 0, got -1"),
    (["health", "127.0.0.1:1", "--timeout", "0"], "--timeout", "must be a finite number > 0, got 0"),
    (["make-certs", "--out", "certs", "--days", "0"], "--days", "must be >= 1, got 0"),
])
def test_a_bad_count_or_duration_is_a_usage_error_naming_the_option(argv, option, reason, capsys):
    from client.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"error: argument {option}: {reason}" in capsys.readouterr().err


def test_make_certs_into_an_unwritable_place_names_the_option(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = [sys.executable, "-m", "client.cli", "make-certs", "--out", str(blocker / "certs")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"error: out: cannot write to {blocker / 'certs'}: "), result.stderr
    assert "Traceback" not in result.stderr


def test_serve_with_a_setting_the_executor_refuses_exits_2_with_its_reason_and_no_traceback(tiny_model_dir):
    argv = [sys.executable, "-m", "client.cli", "serve", "--model", str(tiny_model_dir), "--port", "0",
            "--max-num-seqs", "0"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result
    assert "error: executor did not start (exit 2):" in result.stderr
    assert "error: max_num_seqs: must be >= 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr
