"""scheduler_svc must never import torch or transformers, directly or indirectly.

Every module in the package is discovered with pkgutil, so modules added later are covered too. They are imported
one after another in one fresh interpreter (so that nothing else loaded by the test run can hide or cause an
import), which checks after each import whether a forbidden module got loaded and names the module that loaded it
(an import is never undone, so the first module that pulls one in is the one named).
"""

import pkgutil
import subprocess
import sys

import scheduler_svc

FORBIDDEN = ("torch", "transformers")
CHECK = """
import importlib, sys
forbidden, modules = {forbidden!r}, {modules!r}
for module in modules:
    importlib.import_module(module)
    loaded = [name for name in forbidden if name in sys.modules]
    if loaded:
        sys.exit(f"importing {{module}} imports {{loaded}}")
print(len(modules), "modules imported")
"""


def scheduler_modules() -> list[str]:
    """Every module and subpackage under scheduler_svc, the package itself included."""
    found = [info.name for info in pkgutil.walk_packages(scheduler_svc.__path__, prefix="scheduler_svc.")]
    return ["scheduler_svc", *sorted(found)]


def test_discovery_finds_the_modules():
    modules = scheduler_modules()
    assert "scheduler_svc.block_manager" in modules
    assert "scheduler_svc.tokenizer" in modules
    assert "scheduler_svc.tool_calls.request_parsing" in modules


def import_in_fresh_interpreter(modules: list[str], forbidden: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Import ``modules`` in order in a new Python process; it exits non-zero naming the first one after whose
    import a ``forbidden`` module is loaded."""
    check = CHECK.format(forbidden=forbidden, modules=modules)
    return subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)


def test_the_check_detects_a_forbidden_import_and_names_the_module():
    result = import_in_fresh_interpreter(["json", "email.parser", "csv"], ("email.feedparser",))
    assert result.returncode != 0
    assert "importing email.parser imports ['email.feedparser']" in result.stderr


def test_no_module_imports_torch_or_transformers():
    modules = scheduler_modules()
    result = import_in_fresh_interpreter(modules, FORBIDDEN)
    assert result.returncode == 0, f"importing scheduler_svc's modules failed:\n{result.stderr}"
    assert f"{len(modules)} modules imported" in result.stdout
