"""The README's commands, run as written against `stepahead serve` on the default model.

Only the address changes: the test serves on an ephemeral port instead of 50051, and points the
README's `generate` and `health` commands and its SDK snippet there.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from readme_commands import README, fenced_blocks, stepahead_commands

from client.launcher import ServiceProcess

pytestmark = [pytest.mark.stack, pytest.mark.slow]
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_ADDRESSES = (DEFAULT_ADDRESS, "localhost:50051")  # the latter: the compose stack's published port
SERVING_LINE = r"stepahead serving \S+ on (\S+)"


@pytest.fixture(scope="module")
def served_address(default_model_dir):
    """`stepahead serve` as the README runs it, on an ephemeral port."""
    serve = ServiceProcess("serve", ServiceProcess.cli_argv("serve", "--port", "0"))
    try:
        yield serve.start(SERVING_LINE, timeout_s=600)
    finally:
        serve.stop()


def _pointed_at(argv: list[str], address: str) -> list[str]:
    argv = [address if word in DEFAULT_ADDRESSES else word for word in argv]
    if argv[0] == "generate" and "--server" not in argv:
        argv += ["--server", address]
    return argv


@pytest.mark.parametrize(
    "argv", [a for a in stepahead_commands(README) if a[0] in ("generate", "health")], ids=" ".join
)
def test_readme_client_command_runs(argv, served_address):
    argv = _pointed_at(argv, served_address)
    if "--max-tokens" not in argv and argv[0] == "generate":
        argv += ["--max-tokens", "16"]  # the README lets the model run to EOS; a test need not
    done = subprocess.run(ServiceProcess.cli_argv(*argv), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_readme_sdk_snippet_runs(served_address):
    (snippet,) = fenced_blocks(README, "python")
    assert DEFAULT_ADDRESS in snippet
    done = subprocess.run(
        [sys.executable, "-c", snippet.replace(DEFAULT_ADDRESS, served_address)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"\(\d+(, \d+)*\) (length|stop)", done.stdout), done.stdout
