"""Static input buffers: padding values, fixed addresses, and size checks."""

from __future__ import annotations

import pytest
import torch

from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.static_inputs import PAD_SLOT, StaticStepInputs
from executor_svc.host_batch import HostBatch

BLOCK_SIZE = 4


def two_sequences() -> HostBatch:
    batch = HostBatch(BLOCK_SIZE)
    batch.add_sequence([11], start=5, block_table=[7, 3])  # a decode at position 5 (block 3, offset 1)
    batch.add_sequence([21, 22, 23], start=2, block_table=[9, 1, 8])  # a verify of 3 tokens at 2..4
    return batch


def test_batch_is_written_padded_to_the_shape():
    inputs = StaticStepInputs(max_num_seqs=4, max_query_len=3, max_blocks_per_seq=4, block_size=BLOCK_SIZE,
                              device=torch.device("cpu"))
    shape = GraphShape(4, 3)
    inputs.write(two_sequences(), shape)
    meta = inputs.metadata(shape)
    assert inputs.input_ids(shape).tolist() == [11, 21, 22, 23] + [0] * 8
    assert inputs.positions(shape).tolist() == [5, 2, 3, 4] + [0] * 8
    assert meta.slot_mapping.tolist() == [3 * 4 + 1, 9 * 4 + 2, 9 * 4 + 3, 1 * 4 + 0] + [PAD_SLOT] * 8
    assert meta.query_start_loc.tolist() == [0, 1, 4, 4, 4]
    assert meta.seq_lens.tolist() == [6, 5, 0, 0]
    assert meta.block_tables.tolist() == [[7, 3, 0, 0], [9, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert meta.max_query_len == 3 and meta.is_static and meta.num_tokens == 12 and meta.num_seqs == 4


def test_buffers_keep_their_addresses_and_metadata_objects_across_writes():
    inputs = StaticStepInputs(4, 3, 4, BLOCK_SIZE, torch.device("cpu"))
    shape = GraphShape(2, 3)
    meta = inputs.metadata(shape)
    pointers = [t.data_ptr() for t in (inputs.input_ids(shape), inputs.positions(shape), meta.slot_mapping,
                                       meta.query_start_loc, meta.seq_lens, meta.block_tables)]
    for _ in range(3):
        inputs.write(two_sequences(), shape)
        assert inputs.metadata(shape) is meta
        again = [t.data_ptr() for t in (inputs.input_ids(shape), inputs.positions(shape), meta.slot_mapping,
                                        meta.query_start_loc, meta.seq_lens, meta.block_tables)]
        assert again == pointers


def test_a_batch_that_does_not_fit_is_refused():
    inputs = StaticStepInputs(4, 3, 2, BLOCK_SIZE, torch.device("cpu"))
    with pytest.raises(ValueError, match="do not fit shape"):
        inputs.write(two_sequences(), GraphShape(1, 3))
    with pytest.raises(ValueError, match="do not fit shape"):
        inputs.write(two_sequences(), GraphShape(2, 2))
    long_context = HostBatch(BLOCK_SIZE)
    long_context.add_sequence([1], start=8, block_table=[1, 2, 3])
    with pytest.raises(ValueError, match="block_tables"):
        inputs.write(long_context, GraphShape(1, 1))
