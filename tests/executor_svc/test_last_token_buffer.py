"""LastTokenBuffer: slots follow request ids, survive growth, and are reused once released."""

from __future__ import annotations

import pytest
import torch

from executor_svc.last_token_buffer import LastTokenBuffer


def test_tokens_are_read_back_by_slot_whatever_the_order():
    buffer = LastTokenBuffer(torch.device("cpu"))
    slots = [buffer.assign(rid) for rid in ("a", "b", "c")]
    buffer.write(torch.tensor(slots), torch.tensor([11, 22, 33]))
    order = torch.tensor([buffer.slot("c"), buffer.slot("a"), buffer.slot("b")])
    assert buffer.read(order).tolist() == [33, 11, 22]


def test_growing_keeps_every_token_and_slot():
    buffer = LastTokenBuffer(torch.device("cpu"), initial_slots=2)
    ids = [f"r{i}" for i in range(5)]
    for rid in ids[:2]:
        buffer.assign(rid)
    buffer.write(torch.tensor([buffer.slot("r0"), buffer.slot("r1")]), torch.tensor([7, 8]))
    for rid in ids[2:]:
        buffer.assign(rid)
    assert buffer.tokens.shape[0] == 8
    assert len({buffer.slot(rid) for rid in ids}) == 5
    assert buffer.read(torch.tensor([buffer.slot("r0"), buffer.slot("r1")])).tolist() == [7, 8]


def test_released_slots_are_reused_and_double_assignment_is_refused():
    buffer = LastTokenBuffer(torch.device("cpu"), initial_slots=2)
    first = buffer.assign("a")
    buffer.assign("b")
    with pytest.raises(ValueError, match="request_id 'a'"):
        buffer.assign("a")
    buffer.release("a")
    buffer.release("never-assigned")
    assert buffer.assign("c") == first
    assert buffer.tokens.shape[0] == 2
    buffer.clear()
    assert sorted(buffer.assign(rid) for rid in ("x", "y")) == [0, 1]


def test_initial_slots_must_be_positive():
    with pytest.raises(ValueError, match="initial_slots"):
        LastTokenBuffer(torch.device("cpu"), initial_slots=0)
