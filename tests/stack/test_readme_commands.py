"""The README's commands, run as written against `stepahead serve` on the default model.

Only the addresses change: the test serves on ephemeral ports instead of 50051 and 8000, and points
the README's `generate`, `health` and `curl` commands and its SDK and openai snippets there. The
TLS commands (`--tls-ca`) are run against a TLS stack by tests/stack/test_tls_auth.py instead.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from readme_commands import README, fenced_blocks, shell_commands, stepahead_commands

from client.launcher import ServiceProcess

pytestmark = [pytest.mark.stack, pytest.mark.slow]
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_ADDRESSES = (DEFAULT_ADDRESS, "localhost:50051")  # the latter: the compose stack's published port
SERVING_LINE = r"stepahead serving \S+ on (\S+)"
HTTP_LINE = r"stepahead serving \S+ on \S+ and (http://\S+)"
DEFAULT_HTTP = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def served(default_model_dir):
    """`stepahead serve --http-port` as the README runs it, on ephemeral ports: (gRPC address, HTTP URL)."""
    serve = ServiceProcess("serve", ServiceProcess.cli_argv("serve", "--port", "0", "--http-port", "0"))
    try:
        address = serve.start(SERVING_LINE, timeout_s=600)
        yield address, serve.find(HTTP_LINE)
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def served_address(served):
    return served[0]


def _pointed_at(argv: list[str], address: str) -> list[str]:
    argv = [address if word in DEFAULT_ADDRESSES else word for word in argv]
    if argv[0] in ("generate", "chat") and "--server" not in argv:
        argv += ["--server", address]
    return argv


@pytest.mark.parametrize(
    "argv", [a for a in stepahead_commands(README) if a[0] in ("generate", "chat", "health") and "--tls-ca" not in a],
    ids=" ".join,
)
def test_readme_client_command_runs(argv, served_address):
    argv = _pointed_at(argv, served_address)
    if "--max-tokens" not in argv and argv[0] in ("generate", "chat"):
        argv += ["--max-tokens", "16"]  # the README lets the model run to EOS; a test need not
    typed = None
    if argv[0] == "chat":
        typed = "Hi!\nAnd again?\n"  # two turns of a conversation, then the end of input
        argv += ["--temperature", "0"]
    done = subprocess.run(ServiceProcess.cli_argv(*argv), capture_output=True, text=True, timeout=300, input=typed)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    if typed is not None:
        assert done.stdout == _greedy_conversation(served_address, argv, typed.splitlines())


def _greedy_conversation(address: str, argv: list[str], lines: list[str]) -> str:
    """What `chat` should print for these lines: each greedy reply to the conversation so far, on a line."""
    from client import Client

    history = [{"role": "system", "content": argv[argv.index("--system") + 1]}] if "--system" in argv else []
    printed = ""
    with Client(address) as client:
        for line in lines:
            history.append({"role": "user", "content": line})
            reply = client.generate(messages=history, temperature=0.0, max_tokens=16).text
            history.append({"role": "assistant", "content": reply})
            printed += reply + "\n"
    return printed


def test_readme_curl_command_runs(served):
    (argv,) = [words for words in shell_commands(README) if words[0] == "curl"]
    assert DEFAULT_HTTP in argv[2]
    argv = [word.replace(DEFAULT_HTTP, served[1]) for word in argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and '"chat.completion"' in done.stdout, done.stdout + done.stderr


def test_readme_openai_snippet_runs(served):
    (snippet,) = [block for block in fenced_blocks(README, "python") if "from openai import" in block]
    assert DEFAULT_HTTP in snippet
    done = subprocess.run([sys.executable, "-c", snippet.replace(DEFAULT_HTTP, served[1])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "completion_tokens=" in done.stdout, done.stderr


def test_readme_sdk_snippet_runs(served_address):
    (snippet,) = [block for block in fenced_blocks(README, "python") if "from client import" in block]
    assert DEFAULT_ADDRESS in snippet
    done = subprocess.run(
        [sys.executable, "-c", snippet.replace(DEFAULT_ADDRESS, served_address)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"\(\d+(, \d+)*\) (length|stop)", done.stdout), done.stdout
