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
