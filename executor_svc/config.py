"""Configuration of the executor service."""

from __future__ import annotations

from dataclasses import dataclass

from executor_svc.lora.module_spec import MAX_LORA_ADAPTERS, parse_lora_modules
from stepahead_common.tls import check_pair, check_pem_file

SUPPORTED_DTYPES = ("auto", "float32", "bfloat16", "float16")
SPEC_METHODS = ("auto", "none", "ngram", "draft_model", "eagle", "eagle_ngram")
EAGLE_METHODS = ("auto", "eagle", "eagle_ngram")
"""The methods that load an EAGLE-style head (auto: when one is shipped for the model)."""
ATTENTION_BACKENDS = ("auto", "torch", "torch_padded", "triton")
LOAD_FORMATS = ("auto", "dummy")


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
    dtype: str = "auto"
    """auto: bfloat16 on CUDA, float32 on the CPU (see ``torch_dtype_name``)."""
    block_size: int = 16
    num_kv_blocks: int | None = None
    """KV cache size in blocks; None: as many as kv_cache_memory_gb holds."""
    kv_cache_memory_gb: float = 1.0
    max_model_len: int | None = None
    """Longest prompt + output; None: the model's max_position_embeddings."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None: torch's default."""
    spec_method: str = "none"
    """Drafter for speculative decoding: none, ngram, draft_model, eagle, eagle_ngram (the head's drafts where
    an n-gram lookup finds no match, the lookup's where it does), or auto (eagle_ngram with the drafter shipped
    for the model when there is one, else none)."""
    num_spec_tokens: int = 3
    """K: draft tokens proposed per step when a drafter is on."""
    draft_model_dir: str | None = None
    """HF directory of the draft model (spec_method draft_model); must share the target's vocabulary."""
    eagle_dir: str | None = None
    """Directory of an EAGLE-style drafter (`stepahead train-drafter`); None: the one shipped for the model."""
    ngram_min_n: int = 2
    ngram_max_n: int = 4
    metrics_port: int | None = None
    """Port of the Prometheus /metrics endpoint (None: off, 0: any free port)."""
    attention_backend: str = "auto"
    """auto: triton on CUDA when it imports, else torch (see attention/selection.py)."""
    enforce_eager: bool = False
    """Never replay captured CUDA graphs (graphs are only used on CUDA, with a graph-safe backend)."""
    cpu_weight_packing: bool = True
    """On the CPU in float32, keep oneDNN-packed copies of the projections and LM head for steps of 3+ tokens
    (models/layers.py): faster verify, batched decode and prefill, twice the weights' memory."""
    max_num_seqs: int = 64
    """Most sequences in one step: the largest batch a CUDA graph is captured for."""
    load_format: str = "auto"
    """auto: the checkpoint's weights; dummy: random weights of its shape (for speed measurements)."""
    defer_token_readback: bool | None = None
    """Launch the next step before this one's sampled tokens reach the host, taking its input ids from
    the device (see model_runner.py). None: on for CUDA, off for CPU, where the forward runs on the
    calling thread and deferring would only delay each result by one forward."""
    tls_cert: str | None = None
    """PEM certificate of the Execute service; None: plaintext."""
    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""
    tls_client_ca: str | None = None
    """Mutual TLS: accept only clients (the scheduler) presenting a certificate this CA signed."""
    tensor_parallel_size: int = 1
    """Ranks the model is sharded over, one process each (torch.distributed: gloo on CPU, NCCL on CUDA)."""
    lora_modules: tuple[str, ...] = ()
    """LoRA adapters served over the model, ``NAME=PATH`` each (a peft adapter directory); a request runs with
    one by naming it as its model."""
    max_loras: int | None = None
    """Adapter slots (None: as many as lora_modules); more let the scheduler load adapters while serving."""
    max_lora_rank: int | None = None
    """Largest adapter rank a slot holds (None: the largest of lora_modules, or 16 without any)."""

    @property
    def torch_dtype_name(self) -> str:
        """dtype with auto resolved: bfloat16 on CUDA, float32 on the CPU."""
        if self.dtype == "auto":
            return "bfloat16" if self.device.startswith("cuda") else "float32"
        return self.dtype

    @property
    def defers_token_readback(self) -> bool:
        """defer_token_readback with its default resolved."""
        if self.defer_token_readback is None:
            return self.device.startswith("cuda") and self.tensor_parallel_size == 1
        return self.defer_token_readback

    def __post_init__(self) -> None:
        self._check_serving()
        self._check_model_and_cache()
        self._check_speculation()
        self._check_tls_and_ranks()
        _require(isinstance(self.lora_modules, tuple), "lora_modules", "must be a tuple of NAME=PATH strings")
        modules = parse_lora_modules(self.lora_modules)
        _require(self.max_loras is None or len(modules) <= self.max_loras <= MAX_LORA_ADAPTERS, "max_loras",
                 f"must be in [{len(modules)} (the --lora-modules count), {MAX_LORA_ADAPTERS}], got {self.max_loras}")
        _require(self.max_lora_rank is None or 1 <= self.max_lora_rank <= 512, "max_lora_rank",
                 f"must be in [1, 512], got {self.max_lora_rank}")

    def _check_serving(self) -> None:
        _require(bool(self.model_dir), "model_dir", "must be set")
        _require(0 <= self.port < 65536, "port", f"must be in [0, 65535], got {self.port}")
        _require(
            self.metrics_port is None or 0 <= self.metrics_port < 65536,
            "metrics_port",
            f"must be in [0, 65535], got {self.metrics_port}",
        )
        _require(self.max_num_seqs >= 1, "max_num_seqs", f"must be >= 1, got {self.max_num_seqs}")
        _require(
            self.num_threads is None or self.num_threads >= 1, "num_threads", f"must be >= 1, got {self.num_threads}"
        )

    def _check_model_and_cache(self) -> None:
        _require(self.dtype in SUPPORTED_DTYPES, "dtype", f"must be one of {SUPPORTED_DTYPES}, got {self.dtype!r}")
        _require(
            self.device == "cpu" or self.device.startswith("cuda"),
            "device",
            f"must be cpu or cuda[:N], got {self.device!r}",
        )
        _require(
            self.block_size in (1, 2, 4, 8, 16, 32, 64, 128),
            "block_size",
            f"must be a power of two <= 128, got {self.block_size}",
        )
        _require(
            self.num_kv_blocks is None or self.num_kv_blocks >= 1,
            "num_kv_blocks",
            f"must be >= 1, got {self.num_kv_blocks}",
        )
        _require(self.kv_cache_memory_gb > 0, "kv_cache_memory_gb", f"must be > 0, got {self.kv_cache_memory_gb}")
        _require(
            self.max_model_len is None or self.max_model_len >= 2,
            "max_model_len",
            f"must be >= 2, got {self.max_model_len}",
        )
        _require(
            self.attention_backend in ATTENTION_BACKENDS,
            "attention_backend",
            f"must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}",
        )
        _require(
            self.load_format in LOAD_FORMATS, "load_format", f"must be one of {LOAD_FORMATS}, got {self.load_format!r}"
        )

    def _check_speculation(self) -> None:
        _require(
            self.spec_method in SPEC_METHODS, "spec_method", f"must be one of {SPEC_METHODS}, got {self.spec_method!r}"
        )
        _require(1 <= self.num_spec_tokens <= 16, "num_spec_tokens", f"must be in [1, 16], got {self.num_spec_tokens}")
        _require(
            (self.spec_method == "draft_model") == bool(self.draft_model_dir),
            "draft_model_dir",
            "is required with spec_method draft_model and only then",
        )
        _require(
            self.eagle_dir is None or self.spec_method in EAGLE_METHODS,
            "eagle_dir",
            f"is only used with spec_method eagle, eagle_ngram or auto, got spec_method {self.spec_method!r}",
        )
        _require(
            1 <= self.ngram_min_n <= self.ngram_max_n,
            "ngram_min_n",
            f"must be in [1, ngram_max_n], got {self.ngram_min_n}",
        )

    def _check_tls_and_ranks(self) -> None:
        check_pair(self.tls_cert, self.tls_key, "tls_cert", "tls_key")
        _require(
            self.tls_client_ca is None or self.tls_cert is not None,
            "tls_client_ca",
            "requires tls_cert and tls_key (client certificates are checked over TLS)",
        )
        check_pem_file(self.tls_client_ca, "tls_client_ca")
        _require(
            1 <= self.tensor_parallel_size <= 64,
            "tensor_parallel_size",
            f"must be in [1, 64], got {self.tensor_parallel_size}",
        )
        _require(
            self.tensor_parallel_size == 1 or not self.defers_token_readback,
            "defer_token_readback",
            "must be off with tensor_parallel_size > 1 (every rank runs each step to the end)",
        )
