"""Prompts built from the Python standard library's own source, available offline everywhere.

Two disjoint sets, so that a profile's acceptance is never calibrated on the prompts a benchmark runs:
- calibration prompts (dynamic speculative decoding's acceptance prior): docstrings of CALIBRATION_MODULES,
  asked to be explained;
- code prompts (`stepahead bench --prompts code`): the first lines of top-level functions of
  CODE_MODULES, asked to be completed.
The module lists are fixed and the functions are taken in source order, so a set is the same on every
machine running the same Python minor version.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

CALIBRATION_MODULES = ("textwrap", "string", "shlex", "fnmatch", "glob", "bisect", "heapq", "colorsys",
                       "calendar", "difflib", "statistics", "fractions")
CODE_MODULES = ("json.encoder", "csv", "argparse", "pathlib", "functools", "dataclasses", "enum", "random",
                "tokenize", "ipaddress", "base64", "configparser", "gettext", "pprint", "zipfile", "tarfile")


def _source(module_name: str) -> str | None:
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(encoding="utf-8")


def docstrings(module_name: str, max_chars: int) -> list[str]:
    source = _source(module_name)
    if source is None:
        return []
    docs = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 80:
                docs.append(inspect.cleandoc(doc)[:max_chars])
    return docs


def calibration_prompts(count: int = 16, max_chars: int = 600) -> list[str]:
    """Requests to explain stdlib docstrings, round-robin over CALIBRATION_MODULES."""
    per_module = [docstrings(name, max_chars) for name in CALIBRATION_MODULES]
    prompts: list[str] = []
    for index in range(max(len(docs) for docs in per_module)):
        for docs in per_module:
            if index < len(docs) and len(prompts) < count:
                prompts.append(f"Explain what this documentation says, then repeat its key sentences:\n\n{docs[index]}")
    return prompts


def function_heads(module_name: str, num_lines: int) -> list[str]:
    source = _source(module_name)
    if source is None:
        return []
    lines = source.splitlines()
    heads = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.end_lineno is not None and node.end_lineno - node.lineno >= 8:
            heads.append("\n".join(lines[node.lineno - 1: node.lineno - 1 + num_lines]))
    return heads


def code_prompts(count: int = 80, num_lines: int = 8) -> list[str]:
    """Requests to complete the first lines of stdlib functions, round-robin over CODE_MODULES."""
    per_module = [function_heads(name, num_lines) for name in CODE_MODULES]
    prompts: list[str] = []
    for index in range(max(len(heads) for heads in per_module)):
        for heads in per_module:
            if index < len(heads) and len(prompts) < count:
                prompts.append(f"Complete this Python function:\n\n```python\n{heads[index]}\n```")
    return prompts
