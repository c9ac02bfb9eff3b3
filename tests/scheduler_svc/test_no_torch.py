"""scheduler_svc must never import torch or transformers, directly or indirectly.

Every module in the package is discovered with pkgutil, so modules added later are covered too,
and each is imported in a fresh interpreter so that nothing else loaded by the test run can hide
or cause an import.
"""

import pkgutil
import subprocess
import sys

import pytest

import scheduler_svc

FORBIDDEN = ("torch", "transformers")


def scheduler_modules() -> list[str]:
    """Every module and subpackage under scheduler_svc, the package itself included."""
    found = [info.name for info in pkgutil.walk_packages(scheduler_svc.__path__, prefix="scheduler_svc.")]
    return ["scheduler_svc", *sorted(found)]


def test_discovery_finds_the_modules():
    modules = scheduler_modules()
    assert "scheduler_svc.block_manager" in modules
    assert "scheduler_svc.tokenizer" in modules


def import_in_fresh_interpreter(module: str, forbidden: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Import ``module`` in a new Python process; it exits non-zero if any ``forbidden`` module got loaded."""
    check = (
        f"import {module}; import sys; "
        f"loaded = [name for name in {forbidden!r} if name in sys.modules]; "
        "assert not loaded, f'imports {loaded}'"
    )
    return subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)


def test_the_check_detects_a_forbidden_import():
    result = import_in_fresh_interpreter("email.parser", ("email.feedparser",))
    assert result.returncode != 0
    assert "imports ['email.feedparser']" in result.stderr


@pytest.mark.parametrize("module", scheduler_modules())
def test_module_does_not_import_torch_or_transformers(module):
    result = import_in_fresh_interpreter(module, FORBIDDEN)
    assert result.returncode == 0, f"importing {module} failed:\n{result.stderr}"
