"""How the benchmark's own reference forwards run: device, dtype, attention backend, weights, graphs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ForwardSetup:
    """The executor settings a reference forward mirrors (the bench builds it from the executor flags)."""

    device: str = "cpu"
    dtype: str = "auto"
    """auto: bfloat16 on CUDA, float32 on the CPU (as the executor resolves it)."""
    attention_backend: str = "auto"
    load_format: str = "auto"
    """dummy: random weights of the checkpoint's shape (``--model-shape``)."""

    def __post_init__(self) -> None:
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device: must be cpu or cuda[:N], got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: must be one of {DTYPES}, got {self.dtype!r}")
        if self.load_format not in ("auto", "dummy"):
            raise ValueError(f"load_format: must be auto or dummy, got {self.load_format!r}")

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def dtype_name(self) -> str:
        """dtype with auto resolved."""
        if self.dtype == "auto":
            return "bfloat16" if self.is_cuda else "float32"
        return self.dtype

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
