"""Configuration of the executor service."""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
SPEC_METHODS = ("none", "ngram", "draft_model")


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
    spec_method: str = "none"
    """Drafter for speculative decoding: none, ngram or draft_model."""
    num_spec_tokens: int = 3
    """K: draft tokens proposed per step when a drafter is on."""
    draft_model_dir: str | None = None
    """HF directory of the draft model (spec_method draft_model); must share the target's vocabulary."""
    ngram_min_n: int = 2
    ngram_max_n: int = 4
    metrics_port: int | None = None
    """Port of the Prometheus /metrics endpoint (None: off, 0: any free port)."""
    defer_token_readback: bool | None = None
    """Launch the next step before this one's sampled tokens reach the host, taking its input ids from
    the device (see model_runner.py). None: on for CUDA, off for CPU, where the forward runs on the
    calling thread and deferring would only delay each result by one forward."""

    @property
    def defers_token_readback(self) -> bool:
        """defer_token_readback with its default resolved."""
        if self.defer_token_readback is None:
            return self.device.startswith("cuda")
        return self.defer_token_readback

    def __post_init__(self) -> None:
        _require(bool(self.model_dir), "model_dir", "must be set")
        _require(0 <= self.port < 65536, "port", f"must be in [0, 65535], got {self.port}")
        _require(
            self.metrics_port is None or 0 <= self.metrics_port < 65536,
            "metrics_port",
            f"must be in [0, 65535], got {self.metrics_port}",
        )
        _require(self.dtype in SUPPORTED_DTYPES, "dtype", f"must be one of {SUPPORTED_DTYPES}, got {self.dtype!r}")
        _require(self.device == "cpu" or self.device.startswith("cuda"), "device", f"must be cpu or cuda[:N], got {self.device!r}")
        _require(self.block_size in (1, 2, 4, 8, 16, 32, 64, 128), "block_size", f"must be a power of two <= 128, got {self.block_size}")
        _require(self.num_kv_blocks is None or self.num_kv_blocks >= 1, "num_kv_blocks", f"must be >= 1, got {self.num_kv_blocks}")
        _require(self.kv_cache_memory_gb > 0, "kv_cache_memory_gb", f"must be > 0, got {self.kv_cache_memory_gb}")
        _require(self.max_model_len is None or self.max_model_len >= 2, "max_model_len", f"must be >= 2, got {self.max_model_len}")
        _require(self.num_threads is None or self.num_threads >= 1, "num_threads", f"must be >= 1, got {self.num_threads}")
        _require(self.spec_method in SPEC_METHODS, "spec_method", f"must be one of {SPEC_METHODS}, got {self.spec_method!r}")
        _require(1 <= self.num_spec_tokens <= 16, "num_spec_tokens", f"must be in [1, 16], got {self.num_spec_tokens}")
        _require(
            (self.spec_method == "draft_model") == bool(self.draft_model_dir),
            "draft_model_dir",
            "is required with spec_method draft_model and only then",
        )
        _require(1 <= self.ngram_min_n <= self.ngram_max_n, "ngram_min_n", f"must be in [1, ngram_max_n], got {self.ngram_min_n}")
