"""Which float32 CPU matmul a projection of N rows runs through, chosen by timing them on this machine at load.

The three candidates rank differently on different CPUs. Measured with 2 threads on SmolLM2-135M's gate-up
projection [3072, 576]:
- AMD EPYC (2026-11-27): the weight-stationary (W @ x.T).T with 2 rows costs what one row costs through F.linear and
  half of F.linear with 2-8 rows; oneDNN's matmul over a weight reordered at load (``packed``) beats both from 3 rows.
- Intel Xeon (2026-11-29): F.linear is best for 1-3 rows (135 us), where the weight-stationary product costs 2-3x
  (279-294 us); the packed matmul is best from 4 rows (168 us against 258); the weight-stationary product only
  draws level from 16 rows. A plan fixed for the first machine made every decode step 1.8x slower on the second.
The ranking also differs by shape on one machine (Intel, cold caches: the down projection [576, 1536] is fastest
through F.linear up to 8 rows and slowest packed, the fused QKV [960, 576] through the weight-stationary product from
6 rows). So the executor times them once per process for each projection shape of the model, reading each weight from
memory as a decode step does, and keeps the fastest per row count and shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

LINEAR = "linear"
STATIONARY = "stationary"
PACKED = "packed"
CHOICES = (LINEAR, STATIONARY, PACKED)

ROW_BUCKETS = (1, 2, 3, 4, 6, 8, 16, 32, 64)
"""Row counts timed; N rows take the choice of the smallest bucket >= N (above 64: packed where there is a copy)."""
MAX_STATIONARY_ROWS = 2
"""Most rows the weight-stationary product may serve where a packed copy is the alternative. Its output is a
transposed view that the operations after the projection pay for, which timing the matmul alone misses: on the Intel
machine it timed fastest for 16-32 rows of most shapes, yet made c=16 decode steps 1.2x slower than the packed copy
(`bench/results/cpu_matmul_plan/`). For 1-2 rows those costs are small (AMD's 2x gain was measured over whole decode
forwards). Weights without a packed copy (a drafter's) choose between it and F.linear at every row count."""
MARGIN = 0.9
"""Another choice replaces the incumbent only when it takes at most this share of its time, so that timing noise never
flips it: F.linear for 1-2 rows (and without a packed copy), the packed copy from 3 rows (where timing gave the near
ties to F.linear, c=16 decoded at 0.92x the tok/s of the packed copies on the Intel machine, medians of 3 rounds)."""
MAX_TIMED_OUT_FEATURES = 2048
"""Rows of the weight timed (a slice of a larger one): the ranking holds, the timing stays short for large models."""
_PACK_ROWS_HINT = 4  # the row count oneDNN's reorder is tuned for; measured fastest over 3-1024 rows


@dataclass(frozen=True)
class CpuMatmulPlan:
    """Per ROW_BUCKETS entry, the matmul to run: with a packed copy of the weight (``choices``) and without one
    (``unpacked_choices``: F.linear or the weight-stationary product)."""

    choices: tuple[str, ...]
    unpacked_choices: tuple[str, ...]

    def __post_init__(self) -> None:
        for name, values, allowed in (("choices", self.choices, CHOICES),
                                      ("unpacked_choices", self.unpacked_choices, (LINEAR, STATIONARY))):
            if len(values) != len(ROW_BUCKETS) or any(value not in allowed for value in values):
                raise ValueError(f"{name}: need {len(ROW_BUCKETS)} of {allowed}, got {values}")
        # Per row count 0..64, looked up by every projection of every CPU step: no walk over the buckets there.
        object.__setattr__(self, "_by_rows", {
            has_packed: tuple(_bucket_choice(rows, choices) for rows in range(ROW_BUCKETS[-1] + 1))
            for has_packed, choices in ((True, self.choices), (False, self.unpacked_choices))})

    def choice(self, num_rows: int, has_packed: bool) -> str:
        """The matmul for ``num_rows`` rows of input."""
        if num_rows > ROW_BUCKETS[-1]:
            return PACKED if has_packed else LINEAR
        return self._by_rows[has_packed][num_rows]  # type: ignore[attr-defined]


def _bucket_choice(num_rows: int, choices: tuple[str, ...]) -> str:
    """The choice of the smallest bucket >= ``num_rows``."""
    return next(choice for bucket, choice in zip(ROW_BUCKETS, choices) if num_rows <= bucket)


DEFAULT_PLAN = CpuMatmulPlan((LINEAR,) * 3 + (PACKED,) * 6, (LINEAR,) * len(ROW_BUCKETS))
"""For a weight shape nobody timed: F.linear, the packed copy from 4 rows."""


@dataclass(frozen=True)
class CpuMatmulPlans:
    """The plan of each projection shape [out, in] timed on this machine; DEFAULT_PLAN for the others."""

    by_shape: dict[tuple[int, ...], CpuMatmulPlan]

    def choice(self, num_rows: int, has_packed: bool, shape: tuple[int, ...]) -> str:
        """The matmul for ``num_rows`` rows of input through a weight of ``shape``."""
        return self.by_shape.get(shape, DEFAULT_PLAN).choice(num_rows, has_packed)


_current = [CpuMatmulPlans({})]


def current_plans() -> CpuMatmulPlans:
    """The plans the last model loaded on the CPU measured (none before that: DEFAULT_PLAN for every shape)."""
    return _current[0]


def use_plans(plans: CpuMatmulPlans) -> None:
    """Run every CPU projection of this process by ``plans`` from now on."""
    _current[0] = plans


def pack_for_cpu_matmul(weight: torch.Tensor) -> torch.Tensor | None:
    """``weight`` [out, in] reordered once for oneDNN's float32 matmul (the ``packed`` choice), or None where that does
    not apply: not a float32 CPU tensor, or torch without oneDNN. A second copy of the weight. For eager CPU steps
    only: Inductor cannot lower the packed matmul over a weight that is not a frozen constant (the executor compiles
    nothing on the CPU; CUDA weights are never packed)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS_HINT)


def run_choice(choice: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               packed: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) through ``choice`` (packed needs ``packed``); may return a non-contiguous view."""
    if choice == PACKED and packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")
    if choice == STATIONARY:
        return _weight_stationary(x, weight, bias)
    return F.linear(x, weight, bias)


def weight_stationary_rows(num_rows: int) -> int | None:
    """Rows to run (W @ x.T).T with for ``num_rows`` inputs (padding included), or None above 64 (F.linear): 1-2
    rows padded to 2 and 3-4 to 4 (on the CPUs where this layout pays, its kernel costs the same for those), counts
    between multiples of 8 padded up to the next (it is up to 1.5x slower in between) but 5, 6 and 8k + 1 or 2."""
    if num_rows < 1 or num_rows > ROW_BUCKETS[-1]:
        return None
    if num_rows <= 4:
        return 2 if num_rows <= 2 else 4
    if num_rows <= 6 or num_rows % 8 in (1, 2):
        return num_rows
    return -(-num_rows // 8) * 8


def _weight_stationary(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(W @ x.T).T over weight_stationary_rows(N) rows."""
    n = x.shape[0]
    rows = weight_stationary_rows(n)
    if rows is None:
        return F.linear(x, weight, bias)
    if rows > n:
        x = torch.cat([x, x[-1:].expand(rows - n, -1)])
    else:
        # A transposed input (silu(gate) * up over a previous `.T` output) makes x.T contiguous, which MKL runs
        # through a path about 4x slower than for a row-major x.
        x = x.contiguous()
    out = torch.mm(weight, x.T) if bias is None else torch.addmm(bias.unsqueeze(1), weight, x.T)
    return out[:, :n].T if rows > n else out.T


def measure_plan(weight: torch.Tensor, timer: Callable[[str, int], float] | None = None) -> CpuMatmulPlan:
    """Time the three matmuls on ``weight`` (a float32 CPU projection [out, in]; its first MAX_TIMED_OUT_FEATURES
    rows) for each of ROW_BUCKETS rows and keep the fastest per count. ``timer(choice, rows)``: seconds per call
    (tests); default: the fastest pass of interleaved calls over copies of the weight that exceed the caches, as a
    decode step's weights do."""
    if timer is None:
        timer = _Timer(weight[:MAX_TIMED_OUT_FEATURES])
    choices, unpacked = [], []
    for rows in ROW_BUCKETS:
        times = {choice: timer(choice, rows) for choice in CHOICES}
        unpacked.append(_fastest(times, (LINEAR, STATIONARY), LINEAR))
        small = rows <= MAX_STATIONARY_ROWS
        incumbent = LINEAR if small or times[PACKED] == float("inf") else PACKED
        choices.append(_fastest(times, (LINEAR, STATIONARY, PACKED) if small else (LINEAR, PACKED), incumbent))
    return CpuMatmulPlan(tuple(choices), tuple(unpacked))


def measure_plans(weights: list[torch.Tensor]) -> CpuMatmulPlans:
    """measure_plan for each distinct shape among ``weights`` (2-D float32 CPU tensors)."""
    by_shape: dict[tuple[int, ...], CpuMatmulPlan] = {}
    for weight in weights:
        shape = (weight.shape[0], weight.shape[1])
        if shape not in by_shape:
            by_shape[shape] = measure_plan(weight)
    return CpuMatmulPlans(by_shape)


def _fastest(times: dict[str, float], candidates: tuple[str, ...], incumbent: str) -> str:
    """``incumbent`` unless another candidate takes at most MARGIN of its time (then the fastest of those)."""
    best = min(candidates, key=lambda choice: times[choice])
    return best if times[best] <= MARGIN * times[incumbent] else incumbent


class _Timer:
    """Seconds per call of each choice on copies of one weight: the copies cycled so that each call reads its weight
    from memory, not a cache, as a decode step does; the choices interleaved, in a rotating order, so that drift hits
    them alike; the fastest pass over the copies kept (another process's burst only slows passes down)."""

    ROUNDS = 6
    POOL_BYTES = 64 << 20
    MAX_COPIES = 16

    def __init__(self, weight: torch.Tensor) -> None:
        copies = max(2, min(self.MAX_COPIES, self.POOL_BYTES // max(1, weight.numel() * weight.element_size())))
        self.weights = [weight.detach().clone() for _ in range(copies)]
        self.packs = [pack_for_cpu_matmul(copy) for copy in self.weights]
        self._cache: dict[int, dict[str, float]] = {}

    def __call__(self, choice: str, rows: int) -> float:
        if rows not in self._cache:
            self._cache[rows] = self._time_all(rows)
        return self._cache[rows][choice]

    @torch.inference_mode()
    def _time_all(self, rows: int) -> dict[str, float]:
        x = torch.randn(rows, self.weights[0].shape[1], generator=torch.Generator().manual_seed(rows))
        available = [choice for choice in CHOICES if choice != PACKED or self.packs[0] is not None]
        best = {choice: float("inf") for choice in CHOICES}
        for round_index in range(self.ROUNDS + 1):  # the first round warms up
            shift = round_index % len(available)
            for choice in available[shift:] + available[:shift]:
                start = time.perf_counter()
                for weight, packed in zip(self.weights, self.packs):
                    run_choice(choice, x, weight, None, packed)
                if round_index:
                    best[choice] = min(best[choice], (time.perf_counter() - start) / len(self.weights))
        return best


def add_plans_for(weights: Sequence[torch.Tensor], cache_dir: Path) -> None:
    """Time (or read from ``cache_dir``) the float32 CPU weights among ``weights`` whose shapes the plans in use lack
    (a drafter's, another model's) and use their plans too."""
    current = current_plans()
    missing = [weight.detach() for weight in weights
               if weight.dim() == 2 and weight.device.type == "cpu" and weight.dtype == torch.float32
               and (weight.shape[0], weight.shape[1]) not in current.by_shape]
    if missing:
        added = cached_or_measured_plans(missing, cache_dir)
        use_plans(CpuMatmulPlans({**current.by_shape, **added.by_shape}))


def cached_or_measured_plans(weights: list[torch.Tensor], cache_dir: Path) -> CpuMatmulPlans:
    """measure_plans, kept in ``cache_dir`` for this CPU, torch build and thread count: every process of a machine
    (executor ranks, drafters, the benchmark's bare forward) then runs the same matmuls, and later starts skip the
    timing. Delete the folder to time again."""
    shapes = sorted({(weight.shape[0], weight.shape[1]) for weight in weights})
    path = cache_dir / f"{_machine_key(shapes)}.json"
    try:
        saved = json.loads(path.read_text())
        return CpuMatmulPlans({(entry["shape"][0], entry["shape"][1]):
                               CpuMatmulPlan(tuple(entry["choices"]), tuple(entry["unpacked_choices"]))
                               for entry in saved})
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass  # not timed yet here, or unreadable: time it
    plans = measure_plans(weights)
    entries = [{"shape": list(shape), "choices": list(plan.choices), "unpacked_choices": list(plan.unpacked_choices)}
               for shape, plan in plans.by_shape.items()]
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(entries))
        partial.replace(path)
    except OSError:
        pass  # a read-only cache: every process times for itself
    return plans


def _machine_key(shapes: list[tuple[int, int]]) -> str:
    """What the timing depends on: the CPU, torch's build, its threads, the shapes, and how they were timed."""
    parts = [_cpu_name(), torch.__version__, str(torch.get_num_threads()), repr(shapes), repr(ROW_BUCKETS),
             str(MARGIN), "pool-min-v4"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _cpu_name() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
