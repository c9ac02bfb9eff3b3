"""The LoRA adapters requests may name: the executors' --lora-modules, and those loaded while serving."""

from __future__ import annotations

from collections.abc import Iterable


class ServedAdapters:
    """Names of the served adapters in load order, each with a cache key that changes whenever the name is loaded
    again (prefix caching keys an adapter's blocks by it: a name unloaded and loaded from other files must not find
    the KV its earlier weights wrote)."""

    def __init__(self, names: Iterable[str] = (), max_loras: int | None = None) -> None:
        """``names``: the adapters every executor group started with; ``max_loras``: slots per group (None: as many
        as ``names``)."""
        self._keys: dict[str, str] = {}
        self._loaded_paths: dict[str, str] = {}
        self._loads = 0
        for name in names:
            self._add_key(name)
        self.max_loras = len(self._keys) if max_loras is None else max_loras

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._keys)

    @property
    def loaded_while_serving(self) -> dict[str, str]:
        """Name -> directory of the adapters loaded at runtime (a reconnected executor is sent them again)."""
        return dict(self._loaded_paths)

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def cache_key(self, name: str) -> str | None:
        """The prefix-cache key of a served adapter ("" for the base model; None when ``name`` is not served, as an
        adapter just unloaded). One lookup: a request validated in a worker thread while the event loop unloads the
        adapter finds it served, with its key, or not at all."""
        return self._keys.get(name) if name else ""

    def add(self, name: str, path: str) -> None:
        """Record an adapter every group has just loaded."""
        self._add_key(name)
        self._loaded_paths[name] = path

    def remove(self, name: str) -> None:
        del self._keys[name]
        self._loaded_paths.pop(name, None)

    def _add_key(self, name: str) -> None:
        self._loads += 1
        self._keys[name] = f"{name}\0{self._loads}"
