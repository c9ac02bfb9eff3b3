"""Configuration of the executor service."""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}: {message}")


@dataclass(frozen=True)
class ExecutorConfig:
    """Everything the executor process needs to start."""

    model_dir: str
    """HF model directory (config.json + safetensors, or a GGUF)."""
    model_name: str = ""
    """Name reported to the scheduler (default: the directory's name)."""
    host: str = "127.0.0.1"
    port: int = 50061
    device: str = "cpu"
    dtype: str = "float32"
    block_size: int = 16
    num_kv_blocks: int | None = None
    """KV cache size in blocks; None: as many as kv_cache_memory_gb holds."""
    kv_cache_memory_gb: float = 1.0
    max_model_len: int | None = None
    """Longest prompt + output; None: the model's max_position_embeddings."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None: torch's default."""

    def __post_init__(self) -> None:
        _require(bool(self.model_dir), "model_dir", "must be set")
        _require(0 <= self.port < 65536, "port", f"must be in [0, 65535], got {self.port}")
        _require(self.dtype in SUPPORTED_DTYPES, "dtype", f"must be one of {SUPPORTED_DTYPES}, got {self.dtype!r}")
        _require(self.device == "cpu" or self.device.startswith("cuda"), "device", f"must be cpu or cuda[:N], got {self.device!r}")
        _require(self.block_size in (1, 2, 4, 8, 16, 32, 64, 128), "block_size", f"must be a power of two <= 128, got {self.block_size}")
        _require(self.num_kv_blocks is None or self.num_kv_blocks >= 1, "num_kv_blocks", f"must be >= 1, got {self.num_kv_blocks}")
        _require(self.kv_cache_memory_gb > 0, "kv_cache_memory_gb", f"must be > 0, got {self.kv_cache_memory_gb}")
        _require(self.max_model_len is None or self.max_model_len >= 2, "max_model_len", f"must be >= 2, got {self.max_model_len}")
        _require(self.num_threads is None or self.num_threads >= 1, "num_threads", f"must be >= 1, got {self.num_threads}")
