"""Which adapter holds which slot of the stacks, and loading or unloading one while the executor serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor_svc.lora.adapter_files import read_adapter
from executor_svc.lora.module_spec import LoraModuleSpec
from executor_svc.lora.stacking import LoraStack


@dataclass(frozen=True)
class AdapterChange:
    """The outcome of a load or unload: a gRPC status code's name ("OK" on success), why, and the adapters served
    after it (every tensor-parallel rank computes the same outcome from the same files)."""

    code: str
    message: str
    adapters: tuple[str, ...]


class ServedLoraAdapters:
    """The adapters the executor serves, by name, each in one slot of ``stack`` (None: LoRA is off)."""

    def __init__(self, stack: LoraStack | None, hf_config: Any, initial: dict[str, str] | None = None) -> None:
        """``initial``: name -> directory of the adapters already written to slots 0, 1, ... (--lora-modules)."""
        self.stack = stack
        self.hf_config = hf_config
        self._slots: dict[str, int] = {}
        self._paths: dict[str, str] = {}
        for slot, (name, path) in enumerate((initial or {}).items()):
            self._slots[name], self._paths[name] = slot, path

    @property
    def names(self) -> tuple[str, ...]:
        """The served adapters, in the order they were loaded."""
        return tuple(self._slots)

    @property
    def num_slots(self) -> int:
        return 0 if self.stack is None else self.stack.num_slots

    def slot_of(self, name: str) -> int | None:
        return self._slots.get(name)

    def load(self, name: str, path: str) -> AdapterChange:
        """Read the adapter at ``path`` into a free slot under ``name``. Loading the same name and path again is a
        no-op (a scheduler re-sends its adapters to an executor it reconnects to)."""
        if self.stack is None:
            return self._change("FAILED_PRECONDITION", "LoRA is off on this executor (start it with --max-loras N "
                                "or --lora-modules)")
        if name in self._paths:
            if self._paths[name] == path:
                return self._change("OK", f"adapter {name!r} is already loaded")
            return self._change("ALREADY_EXISTS", f"adapter {name!r} is loaded from {self._paths[name]}; unload it "
                                "first to load another")
        free = sorted(set(range(self.stack.num_slots)) - set(self._slots.values()))
        if not free:
            return self._change("RESOURCE_EXHAUSTED", f"all {self.stack.num_slots} adapter slots are in use "
                                f"({list(self._slots)}); unload one or start the executor with a larger --max-loras")
        try:
            spec = LoraModuleSpec.parse(f"{name}={path}")
            self.stack.write(free[0], read_adapter(spec, self.hf_config))
        except (ValueError, OSError) as error:
            return self._change("INVALID_ARGUMENT", str(error))
        self._slots[name], self._paths[name] = free[0], path
        return self._change("OK", f"adapter {name!r} loaded")

    def unload(self, name: str) -> AdapterChange:
        """Free ``name``'s slot (zeroed, so nothing can read the adapter any more)."""
        slot = self._slots.pop(name, None)
        if slot is None or self.stack is None:
            return self._change("NOT_FOUND", f"adapter {name!r} is not loaded; loaded: {list(self._slots)}")
        del self._paths[name]
        self.stack.clear(slot)
        return self._change("OK", f"adapter {name!r} unloaded")

    def _change(self, code: str, message: str) -> AdapterChange:
        return AdapterChange(code, message, self.names)
