"""The installed stepahead's version (``stepahead --version``, ``GET /version``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The version of the installed ``stepahead`` distribution, or "unknown" when it is run from a tree that was
    never installed (``pip install -e .`` counts as installed)."""
    try:
        return version("stepahead")
    except PackageNotFoundError:
        return "unknown"
