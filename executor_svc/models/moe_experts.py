"""Four ways to run the chosen experts, all computing the same sums.

- ``grouped_experts``: the picks sorted by expert, one pair of matmuls per expert that has any (what HF does);
  the least work, but the expert sizes are read on the host: for eager steps (the CPU, GPU prefill chunks).
- ``grouped_mm_experts``: the same sorted picks through torch's grouped GEMM (``F.grouped_mm``), whose group ends
  stay on the device: for captured steps where its kernel runs without the host (bf16 on Hopper GPUs; elsewhere
  torch falls back to a loop that copies the group ends to the host).
- ``gathered_experts``: each pick's expert weights gathered and applied as a batched matrix-vector product; no
  host read, work proportional to the picks: for other captured steps with fewer picks than experts.
- ``dense_experts``: every expert on every token, weighted by a routing matrix that is zero off the picks; no host
  read, each expert's weights read once: for other captured steps with more picks than experts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from executor_svc.models.layers import linear

Activation = Callable[[torch.Tensor], torch.Tensor]
GatedActivation = Callable[[torch.Tensor], torch.Tensor]
"""An expert's gate/up projection [..., 2I] (gate rows first) -> its hidden activations [..., I]."""
ExpertBiases = tuple[torch.Tensor | None, torch.Tensor | None]
"""Every expert's gate/up bias [E, 2I] and down bias [E, hidden] (GPT-OSS's experts; None: none)."""


def glu(act: Activation) -> GatedActivation:
    """act(gate) * up: the gated MLPs of every family but GPT-OSS."""
    def gated(gate_up: torch.Tensor) -> torch.Tensor:
        size = gate_up.shape[-1] // 2
        return act(gate_up[..., :size]) * gate_up[..., size:]

    return gated


def clamped_swiglu(alpha: float, limit: float) -> GatedActivation:
    """GPT-OSS's experts: gate clamped above at ``limit``, up to [-limit, limit], then (up + 1) * gate *
    sigmoid(alpha * gate)."""
    def gated(gate_up: torch.Tensor) -> torch.Tensor:
        size = gate_up.shape[-1] // 2
        gate = gate_up[..., :size].clamp(max=limit)
        up = gate_up[..., size:].clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))

    return gated


def weigh(outputs: torch.Tensor, weights: torch.Tensor, float32_weights: bool) -> torch.Tensor:
    """Expert outputs [..., hidden] times their routing weights [..., 1] in the activations' dtype: computed in
    float32 then cast (``float32_weights``, as Mixtral does) or with the weights cast first (as Qwen does)."""
    if float32_weights:
        return (outputs * weights).to(outputs.dtype)
    return outputs * weights.to(outputs.dtype)


def grouped_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                    down: torch.Tensor, gated: GatedActivation, float32_weights: bool,
                    packed: Sequence[tuple[torch.Tensor | None, torch.Tensor | None]] = (),
                    biases: ExpertBiases = (None, None)) -> torch.Tensor:
    """The weighted sum of each token's experts, one expert at a time over the tokens that picked it.

    x [T, hidden]; ids, weights [T, top_k]; gate_up [E, 2I, hidden]; down [E, hidden, I]; ``packed``: per expert,
    the oneDNN-packed (gate_up, down) of pack_for_cpu_matmul (empty: none); ``biases``: the experts' gate/up
    [E, 2I] and down [E, hidden] biases (GPT-OSS; None: none). Reads the expert sizes on the host."""
    order, rows = _sorted_picks(x, ids)
    counts = torch.bincount(ids.flatten(), minlength=gate_up.shape[0]).tolist()
    outputs = torch.empty_like(rows)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        packed_gate_up, packed_down = packed[expert] if packed else (None, None)
        gate_up_bias, down_bias = (None if bias is None else bias[expert] for bias in biases)
        hidden = gated(linear(rows[start : start + count], gate_up[expert], gate_up_bias, packed_gate_up))
        outputs[start : start + count] = linear(hidden, down[expert], down_bias, packed_down)
        start += count
    return _weighted_sums(outputs, weights, order, float32_weights)


def grouped_mm_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                       down: torch.Tensor, gated: GatedActivation, float32_weights: bool,
                       biases: ExpertBiases = (None, None)) -> torch.Tensor:
    """grouped_experts' sums through two grouped GEMMs over the picks sorted by expert; nothing is read on the
    host here (whether torch's kernel for the device and dtype does: see grouped_mm_runs_on_device)."""
    order, rows = _sorted_picks(x, ids)
    experts = torch.arange(gate_up.shape[0], device=ids.device, dtype=ids.dtype)
    sorted_ids = ids.flatten()[order]
    group_ends = torch.searchsorted(sorted_ids, experts, right=True).to(torch.int32)
    hidden = gated(_add_bias(F.grouped_mm(rows, gate_up.transpose(1, 2), offs=group_ends), biases[0], sorted_ids))
    outputs = _add_bias(F.grouped_mm(hidden, down.transpose(1, 2), offs=group_ends), biases[1], sorted_ids)
    return _weighted_sums(outputs, weights, order, float32_weights)


def grouped_mm_runs_on_device(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> bool:
    """Whether torch's grouped GEMM has a kernel for these tensors that reads nothing on the host: bfloat16 on a
    CUDA device of compute capability 9.0 or above, every matrix dimension a multiple of 8 (16-byte strides)."""
    if not x.is_cuda or x.dtype != torch.bfloat16 or gate_up.dtype != torch.bfloat16:
        return False
    if any(size % 8 for size in (x.shape[1], gate_up.shape[1], down.shape[2])):
        return False
    return torch.cuda.get_device_capability(x.device) >= (9, 0)


def gathered_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                     down: torch.Tensor, gated: GatedActivation, float32_weights: bool,
                     biases: ExpertBiases = (None, None)) -> torch.Tensor:
    """grouped_experts' sums with each pick's expert weights gathered (T * top_k copies of an expert's weights)."""
    tokens, top_k = ids.shape
    picks = ids.flatten()
    rows = x.unsqueeze(1).expand(tokens, top_k, x.shape[1]).reshape(tokens * top_k, x.shape[1], 1)
    hidden = gated(_add_bias(torch.bmm(gate_up[picks], rows).squeeze(2), biases[0], picks))
    outputs = _add_bias(torch.bmm(down[picks], hidden.unsqueeze(2)).squeeze(2), biases[1], picks)
    weighted = weigh(outputs.view(tokens, top_k, -1), weights.unsqueeze(2), float32_weights)
    return weighted.sum(dim=1)


def dense_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                  down: torch.Tensor, gated: GatedActivation, float32_weights: bool,
                  biases: ExpertBiases = (None, None)) -> torch.Tensor:
    """grouped_experts' sums with every expert run on every token and weighted by zero where not picked."""
    gate_up_bias, down_bias = biases
    projected = torch.matmul(x, gate_up.transpose(1, 2))  # [E, T, 2I]
    hidden = gated(projected if gate_up_bias is None else projected + gate_up_bias.unsqueeze(1))
    if down_bias is None:
        outputs = torch.bmm(hidden, down.transpose(1, 2))  # [E, T, hidden]
    else:
        outputs = torch.baddbmm(down_bias.unsqueeze(1), hidden, down.transpose(1, 2))
    routing = torch.zeros(ids.shape[0], gate_up.shape[0], dtype=weights.dtype, device=weights.device)
    routing = routing.scatter(1, ids, weights)  # [T, E]
    return weigh(outputs, routing.T.unsqueeze(2), float32_weights).sum(dim=0)


def graph_safe_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                       down: torch.Tensor, gated: GatedActivation, float32_weights: bool,
                       biases: ExpertBiases = (None, None)) -> torch.Tensor:
    """The experts without reading anything on the host: torch's grouped GEMM where its kernel allows, else
    gathered while the picks are fewer than the experts (decoding few sequences reads only the picked experts),
    else dense. Chosen by device, dtype and shapes alone, so a captured graph holds one of them."""
    if grouped_mm_runs_on_device(x, gate_up, down):
        run = grouped_mm_experts
    else:
        run = gathered_experts if ids.numel() <= gate_up.shape[0] else dense_experts
    return run(x, ids, weights, gate_up, down, gated, float32_weights, biases)


def _sorted_picks(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The picks ids [T, top_k] sorted by expert (stable): their order in the flat picks, and each one's token row
    of x."""
    order = ids.flatten().argsort(stable=True)
    return order, x[order // ids.shape[1]]


def _weighted_sums(outputs: torch.Tensor, weights: torch.Tensor, order: torch.Tensor, float32_weights: bool
                   ) -> torch.Tensor:
    """Expert outputs of the sorted picks (rows in ``order``) -> [T, hidden]: weighted (weigh), then each token's
    top_k summed in pick order: no atomic adds, so the same sums on every run and every device."""
    weighted = weigh(outputs, weights.flatten()[order].unsqueeze(1), float32_weights)
    by_pick = torch.empty_like(weighted).index_copy_(0, order, weighted)
    return by_pick.view(-1, weights.shape[1], weighted.shape[1]).sum(dim=1)


def _add_bias(rows: torch.Tensor, bias: torch.Tensor | None, experts: torch.Tensor) -> torch.Tensor:
    """rows [N, width] plus the bias [E, width] of each row's expert (``experts`` [N]); None: no bias."""
    return rows if bias is None else rows + bias.index_select(0, experts)
