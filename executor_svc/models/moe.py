"""The routed-experts MLP of the MoE families (with a shared expert: Qwen2-MoE's gated, Granite MoE shared's and the
DeepSeek-style routers' not)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

import torch
from torch import nn

from executor_svc.lora.projection import AdapterRows
from executor_svc.models.layers import linear, pack_for_cpu_matmul
from executor_svc.models.moe_experts import clamped_swiglu, glu, graph_safe_experts, grouped_experts
from executor_svc.models.moe_routing import route
from executor_svc.models.moe_settings import MoeSettings
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

if TYPE_CHECKING:
    from collections.abc import Callable


class SharedExpert(Protocol):
    """A dense gated MLP (LlamaMLP) whose output before the tensor-parallel sum this block adds to the experts'."""

    def partial_output(self, x: torch.Tensor, adapters: AdapterRows | None = None) -> torch.Tensor: ...


class SparseMoeBlock(nn.Module):
    """Each token's top-k experts (gated MLPs) weighted by the router, plus an optional shared expert.

    Under tensor parallelism every rank holds every expert's share of the intermediate rows (like the dense MLP:
    gate/up column-parallel, down row-parallel) and routes alike (the router is replicated), so one all-reduce sums
    the experts' and the shared expert's partial outputs."""

    def __init__(self, hidden_size: int, moe: MoeSettings, act: Callable[[torch.Tensor], torch.Tensor],
                 shared_expert: nn.Module | None, tp: TensorParallel = SINGLE) -> None:
        """``shared_expert``: a LlamaMLP of the shared expert's size (its ``partial_output`` is used), or None."""
        super().__init__()
        self.tp = tp
        self.settings = moe
        self.gated = clamped_swiglu(*moe.clamped_swiglu) if moe.clamped_swiglu else glu(act)
        """An expert's hidden activations from its gate/up projection."""
        start, end = tp.split(moe.expert_intermediate_size, moe.intermediate_size_field)
        self.intermediate_size = end - start
        self.intermediate_offset = start
        """The first row of each expert's gate/up (column of its down) projection that this rank holds."""
        self.router_weight = nn.Parameter(torch.empty(moe.num_experts, hidden_size), requires_grad=False)
        self.router_bias = nn.Parameter(torch.zeros(moe.num_experts), requires_grad=False) if moe.router_bias else None
        self.router_correction_bias = (
            nn.Parameter(torch.zeros(moe.num_experts), requires_grad=False) if moe.score_correction_bias else None
        )
        """Added to the scores for the choice of experts only (DeepSeek-V3's e_score_correction_bias)."""
        self.experts_gate_up_weight = nn.Parameter(
            torch.empty(moe.num_experts, 2 * self.intermediate_size, hidden_size), requires_grad=False
        )
        self.experts_down_weight = nn.Parameter(
            torch.empty(moe.num_experts, hidden_size, self.intermediate_size), requires_grad=False
        )
        biased = moe.expert_biases
        self.experts_gate_up_bias = (
            nn.Parameter(torch.zeros(moe.num_experts, 2 * self.intermediate_size), requires_grad=False) if biased
            else None
        )
        self.experts_down_bias = (
            nn.Parameter(torch.zeros(moe.num_experts, hidden_size), requires_grad=False) if biased else None
        )
        """Added by rank 0 only under tensor parallelism: the ranks' partial outputs are summed."""
        self.shared_expert = shared_expert
        gated = shared_expert is not None and moe.shared_expert_gated
        self.shared_expert_gate_weight = (
            nn.Parameter(torch.empty(1, hidden_size), requires_grad=False) if gated else None
        )
        self.packed_experts: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []
        """pack_weights' per-expert (gate_up, down) copies (plain attributes, like LlamaMLP's ``packed``)."""

    def pack_weights(self) -> None:
        """Keep oneDNN-packed copies of each expert's projections for CPU float32 matmuls of 3+ rows (layers.py;
        the shared expert, a LlamaMLP, packs its own)."""
        packs = [(pack_for_cpu_matmul(gate_up), pack_for_cpu_matmul(down))
                 for gate_up, down in zip(self.experts_gate_up_weight, self.experts_down_weight)]
        self.packed_experts = packs if all(a is not None and b is not None for a, b in packs) else []

    def forward(self, x: torch.Tensor, adapters: AdapterRows | None = None, graph_safe: bool = False
                ) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]. ``graph_safe``: nothing read on the host (a captured or compiled step),
        else the experts that have tokens run one by one. ``adapters``: handed to the shared expert, which holds no
        adapter either (LoRA adapts a MoE model's attention only)."""
        settings = self.settings
        weights, ids = route(x, self.router_weight, settings, self.router_correction_bias, self.router_bias)
        gate_up, down = self.experts_gate_up_weight, self.experts_down_weight
        float32_weights = settings.float32_routing_weights
        down_bias = self.experts_down_bias if not self.tp.enabled or self.tp.rank == 0 else None
        biases = (self.experts_gate_up_bias, down_bias)
        rows = x
        if settings.weights_scale_inputs:
            # Llama 4: each (token, expert) pair is a row of its own, its input scaled by its weight, summed after.
            rows = (x.unsqueeze(1) * weights.to(x.dtype).unsqueeze(2)).flatten(0, 1)
            ids, weights = ids.reshape(-1, 1), torch.ones_like(weights).reshape(-1, 1)
        if graph_safe or torch.compiler.is_compiling():
            out = graph_safe_experts(rows, ids, weights, gate_up, down, self.gated, float32_weights, biases)
        else:
            out = grouped_experts(rows, ids, weights, gate_up, down, self.gated, float32_weights, self.packed_experts,
                                  biases)
        if settings.weights_scale_inputs and settings.top_k > 1:
            out = out.view(x.shape[0], settings.top_k, -1).sum(dim=1)
        if self.shared_expert is not None:
            shared = cast(SharedExpert, self.shared_expert).partial_output(x, adapters)
            if self.shared_expert_gate_weight is not None:
                shared = torch.sigmoid(linear(x, self.shared_expert_gate_weight)) * shared
            out = out + shared
        out = self.tp.all_reduce(out.contiguous()) if self.tp.enabled else out
        # ERNIE's biased shared experts: added once. Read here, not kept from __init__: to_empty() replaces parameters.
        shared_bias = getattr(self.shared_expert, "down_bias", None)
        return out if shared_bias is None else out + shared_bias
