"""Where each checkpoint tensor goes in the decoder's fused parameters: a view, the tensor's full shape, and the slice
of it this rank holds under tensor parallelism (the building blocks of llama_weights.py and moe_weights.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor_svc.models.llama import LlamaMLP
from executor_svc.models.xielu import XIELU_PARAMETERS
from executor_svc.parallel.tensor_parallel import TensorParallel


@dataclass(frozen=True)
class Target:
    """Where one HF tensor goes: a view into a parameter, the shape the tensor must have, and the slice of it
    this rank holds (dim, start, end; None: all of it)."""

    view: torch.Tensor
    shape: tuple[int, ...]
    part: tuple[int, int, int] | None = None
    offset: float = 0.0
    """Added to the values (in float32, before the cast): Gemma's norms scale by 1 + the stored weight."""

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.part is not None:
            dim, start, end = self.part
            tensor = tensor.narrow(dim, start, end - start)
        return tensor if self.offset == 0.0 else tensor.float() + self.offset


Targets = Target | tuple[Target, ...]
"""Where one HF tensor goes: one target, or several slices of it (a stacked gate/up tensor under tensor
parallelism)."""


def whole_target(param: torch.Tensor, offset: float = 0.0) -> Target:
    """The target for all of ``param`` (``offset`` added to the values: Gemma's 1 + w norms)."""
    return Target(param.data, tuple(param.shape), offset=offset)


def part_target(tp: TensorParallel, view: torch.Tensor, dim: int, offset: int, full: int) -> Target:
    """The target for ``view``, which holds [offset, offset + its size) along ``dim`` of a checkpoint tensor of
    size ``full`` there (all of it without tensor parallelism)."""
    if not tp.enabled:
        return Target(view, tuple(view.shape))
    shape = list(view.shape)
    shape[dim] = full
    return Target(view, tuple(shape), (dim, offset, offset + view.shape[dim]))


def gated_targets(names: tuple[str, str, str], gate_up: torch.Tensor, down: torch.Tensor, tp: TensorParallel,
                   offset: int, full_size: int) -> dict[str, Target]:
    """The checkpoint's gate, up and down tensors (``names``, without ``.weight``) into a fused gate/up [2 * size,
    hidden] and a down [hidden, size] holding rows ``offset`` on of ``full_size``."""
    size = down.shape[1]
    gate, up, down_name = names
    return {
        f"{gate}.weight": part_target(tp, gate_up[:size], 0, offset, full_size),
        f"{up}.weight": part_target(tp, gate_up[size:], 0, offset, full_size),
        f"{down_name}.weight": part_target(tp, down, 1, offset, full_size),
    }


def gate_up_halves(tp: TensorParallel, view: torch.Tensor, dim: int, offset: int, full: int) -> Targets:
    """The target(s) of a checkpoint tensor stacking gate then up rows (``full`` each) along ``dim`` into ``view``,
    which holds this rank's gate rows then its up rows: under tensor parallelism, one slice of each half."""
    if not tp.enabled:
        return Target(view, tuple(view.shape))
    size = view.shape[dim] // 2
    shape = list(view.shape)
    shape[dim] = 2 * full
    gate, up = view.narrow(dim, 0, size), view.narrow(dim, size, size)
    return (Target(gate, tuple(shape), (dim, offset, offset + size)),
            Target(up, tuple(shape), (dim, full + offset, full + offset + size)))


def mlp_targets(prefix: str, mlp: LlamaMLP, tp: TensorParallel,
                 names: tuple[str | None, str, str] = ("gate_proj", "up_proj", "down_proj")) -> dict[str, Targets]:
    """An MLP's projections (``names`` after ``prefix``: gate, None without a gate, up and down) and their biases
    into its fused gate/up and its down projection (the checkpoint's rows: ``mlp.full_intermediate_size``)."""
    gate, up, down = names
    size, offset, full_size = mlp.intermediate_size, mlp.intermediate_offset, mlp.full_intermediate_size
    gate_up, bias = mlp.gate_up_weight.data, mlp.gate_up_bias
    targets: dict[str, Targets]
    if gate is None:  # no gate: the fused parameter holds the up projection alone
        targets = {f"{prefix}{up}.weight": part_target(tp, gate_up, 0, offset, full_size),
                   f"{prefix}{down}.weight": part_target(tp, mlp.down_weight.data, 1, offset, full_size)}
        if bias is not None:
            targets[f"{prefix}{up}.bias"] = part_target(tp, bias.data, 0, offset, full_size)
    else:
        targets = dict(gated_targets((prefix + gate, prefix + up, prefix + down), gate_up, mlp.down_weight.data, tp,
                                      offset, full_size))
        if bias is not None:
            targets[f"{prefix}{gate}.bias"] = part_target(tp, bias.data[:size], 0, offset, full_size)
            targets[f"{prefix}{up}.bias"] = part_target(tp, bias.data[size:], 0, offset, full_size)
    if mlp.down_bias is not None:
        targets[f"{prefix}{down}.bias"] = whole_target(mlp.down_bias)
    if mlp.xielu_parameters is not None:  # Apertus: [1] coefficients and [] constants beside the projections
        act = f"{prefix}{up.rpartition('.')[0]}.act_fn." if "." in up else f"{prefix}act_fn."
        for index, name in enumerate(XIELU_PARAMETERS):
            view = mlp.xielu_parameters.data[index : index + 1]
            targets[act + name] = Target(view if name.startswith("alpha") else view.view(()),
                                         (1,) if name.startswith("alpha") else ())
    return targets
