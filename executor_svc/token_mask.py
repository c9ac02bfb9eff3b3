"""Token masks on the device: which rows of a batch may take only some tokens, and which (structured output's format,
or a request's allowed_token_ids). Applied after the logit bias, penalties and bad words, so a forbidden token stays
forbidden whatever its bias."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from executor_svc.host_transfer import host_list_to_device

_BIT = 32


@dataclass
class TokenMask:
    """Restricted rows and their bit masks (bit t of a row: token t allowed), on the logits' device."""

    rows: Tensor  # [R] long
    bits: Tensor  # [R, words] int32

    @classmethod
    def build(cls, masks: dict[int, np.ndarray], device: torch.device | str) -> TokenMask | None:
        """From {row: int32 bit mask [words]} (None when no row is restricted)."""
        if not masks:
            return None
        row_ids = sorted(masks)
        bits = np.stack([masks[row] for row in row_ids])
        tensor = torch.from_numpy(bits)
        if torch.device(device).type == "cuda":
            tensor = tensor.pin_memory().to(device, non_blocking=True)
        return cls(rows=host_list_to_device(row_ids, device), bits=tensor)

    def allowed(self, vocab_size: int) -> Tensor:
        """[R, vocab_size] bool: the tokens each restricted row may take."""
        if self.bits.device.type == "cpu":  # numpy's unpacking is ~10x torch's shifts here
            host_bits = np.unpackbits(self.bits.numpy().view(np.uint8), axis=1, bitorder="little")
            return torch.from_numpy(host_bits[:, :vocab_size].view(np.bool_))
        return unpack_bits(self.bits, vocab_size)


def unpack_bits(bits: Tensor, vocab_size: int) -> Tensor:
    """[R, words] int32 bit masks as [R, vocab_size] bool, with tensor ops on the masks' own device (a GPU's path;
    it runs on the CPU too, where tests check it)."""
    shifts = torch.arange(_BIT, device=bits.device, dtype=torch.int32)
    unpacked = (bits.unsqueeze(-1) >> shifts) & 1
    return unpacked.reshape(bits.shape[0], -1)[:, :vocab_size].bool()


def apply_token_mask(logits: Tensor, mask: TokenMask) -> Tensor:
    """Logits [N, V] with every forbidden token of a restricted row at -inf (a new tensor): one pass over the
    logits, whose cost is memory traffic (rows x 49,152 floats)."""
    allowed = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    allowed[mask.rows] = mask.allowed(logits.shape[-1])
    return torch.where(allowed, logits, torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))


def mask_words(vocab_size: int) -> int:
    """32-bit words of one row's bit mask."""
    return (vocab_size + _BIT - 1) // _BIT


def token_bits(token_ids: Iterable[int], vocab_size: int) -> np.ndarray:
    """The int32 bit mask [words] allowing exactly ``token_ids`` (each in [0, vocab_size)), as TokenMask.build takes
    it: bit t of word t // 32 is token t."""
    flags = np.zeros(mask_words(vocab_size) * _BIT, dtype=np.bool_)
    flags[list(token_ids)] = True
    return np.packbits(flags, bitorder="little").view(np.int32)


def allows_every_token(bits: np.ndarray) -> bool:
    """Whether a row's bit mask restricts nothing (every word all ones)."""
    return bool((bits == -1).all())


def token_allowed(bits: np.ndarray, token_id: int) -> bool:
    """Whether a bit mask from token_bits allows ``token_id`` (one outside it is not allowed)."""
    word = token_id // _BIT
    return 0 <= word < len(bits) and bool((int(bits[word]) >> (token_id % _BIT)) & 1)
