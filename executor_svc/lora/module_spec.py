"""The ``--lora-modules NAME=PATH`` entries of the executor (no torch: the config imports this)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LORA_ADAPTERS = 64
"""Most adapters one executor serves (each adds its rank to every adapted projection's stacked matmuls)."""


@dataclass(frozen=True)
class LoraModuleSpec:
    """One ``--lora-modules`` entry: the name requests use and the adapter's directory."""

    name: str
    path: str

    @classmethod
    def parse(cls, entry: str) -> LoraModuleSpec:
        """``NAME=PATH``; ValueError naming lora_modules when malformed."""
        name, sep, path = entry.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"lora_modules: {entry!r} is not NAME=PATH")
        if name != name.strip() or any(char.isspace() for char in name):
            raise ValueError(f"lora_modules: adapter name {name!r} must not contain whitespace")
        return cls(name, path)


def parse_lora_modules(entries: tuple[str, ...]) -> tuple[LoraModuleSpec, ...]:
    """Every entry parsed; ValueError naming lora_modules for a malformed entry, a repeated name or too many."""
    specs = tuple(LoraModuleSpec.parse(entry) for entry in entries)
    names = [spec.name for spec in specs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"lora_modules: adapter names must be unique; repeated: {repeated}")
    if len(specs) > MAX_LORA_ADAPTERS:
        raise ValueError(f"lora_modules: at most {MAX_LORA_ADAPTERS} adapters, got {len(specs)}")
    return specs
