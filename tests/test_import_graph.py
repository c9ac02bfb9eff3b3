"""The project's import graph: no circles between modules, and the layering the design promises.

Every `import` in the project's packages counts, those under `if TYPE_CHECKING:` and inside functions
included: a circle drawn only for the type checker is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stepahead_common", "scheduler_svc", "executor_svc", "client")
# Which packages each package may import from (besides itself).
ALLOWED_DEPENDENCIES = {
    "stepahead_common": set(),
    "scheduler_svc": {"stepahead_common"},
    "executor_svc": {"stepahead_common"},
    "client": {"stepahead_common", "scheduler_svc", "executor_svc"},
}


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the given packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name the module imports, relative imports resolved, `from a import b` as a.b and a."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, is_package, node)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    base = parts[:keep]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Project module -> the project modules it imports (a name resolves to the longest module it names)."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(module, path):
            target = _longest_module(name, modules)
            if target is not None and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def _longest_module(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_project_has_no_import_cycles():
    graph = import_graph(ROOT, PACKAGES)
    assert "executor_svc.models.llama" in graph and "scheduler_svc.engine" in graph
    assert import_cycles(graph) == []


def test_packages_import_only_what_the_layering_allows():
    wrong = []
    for module, targets in import_graph(ROOT, PACKAGES).items():
        package = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != package and other not in ALLOWED_DEPENDENCIES[package]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_check_finds_a_cycle_drawn_only_for_the_type_checker(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n"
    )
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    (package / "d.py").write_text("import pkg.a\n")
    assert import_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
