"""Row-wise argmax over a wide last dimension, exactly torch.argmax(dim=-1), faster on CPU.

torch's CPU argmax tracks an index per element and is not vectorised: over 16 rows of a
49k vocabulary it takes about 0.45 ms on one core, a tenth of a small model's whole step.
``amax`` is vectorised and about 13x faster. So the rows are cut into fixed-width chunks: the
chunk maxima (amax) say which chunk holds each row's first maximum, and only that chunk is
searched with argmax.

Same result as torch.argmax, ties and NaN included: the first chunk whose maximum is the row's
maximum holds the row's first maximum (argmax over the chunk maxima returns the first of
equal ones), and amax and argmax both treat NaN as the largest value.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 1024
"""Chunk width: wide enough for amax to run vectorised, small enough to search one chunk cheaply."""


def row_argmax(values: Tensor, chunk: int = CHUNK) -> Tensor:
    """Index of the first maximum of each row of a 2-D tensor (torch.argmax(values, dim=-1))."""
    if values.dim() != 2:
        raise ValueError(f"row_argmax takes a 2-D tensor, got shape {tuple(values.shape)}")
    num_rows, width = values.shape
    if values.device.type != "cpu" or values.stride(-1) != 1 or width < 16 * chunk or num_rows == 0:
        # GPU argmax is one fast kernel; narrow rows gain nothing; and over a column-major layout
        # (the weight-stationary LM head's logits) amax is no faster than argmax.
        return values.argmax(dim=-1)
    num_full = width // chunk
    chunk_max = values[:, : num_full * chunk].unflatten(-1, (num_full, chunk)).amax(dim=-1)
    if num_full * chunk < width:
        tail_max = values[:, num_full * chunk:].amax(dim=-1, keepdim=True)
        chunk_max = torch.cat([chunk_max, tail_max], dim=1)
    starts = chunk_max.argmax(dim=-1) * chunk
    # The tail chunk is narrower: clamping repeats the row's last element past its end, and a
    # repeat never comes before the element it repeats, so the first maximum is unchanged.
    window = (starts[:, None] + torch.arange(chunk, device=values.device)).clamp_(max=width - 1)
    return starts + values.gather(1, window).argmax(dim=-1)
