"""A one-plane KV cache (latent attention: the cached vector is key and value) read by the torch backends exactly
as a two-plane cache holding the same vector twice, and refused where it cannot be read."""

from __future__ import annotations

import pytest
import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend

BLOCK_SIZE = 4
NUM_BLOCKS = 24
HEADS, HEAD_DIM = 4, 12
BACKENDS = [TorchAttentionBackend, PaddedTorchAttentionBackend]
# A prefill chunk with cached context, a decode, a verify of 4, a whole prompt; long enough for the window.
QUERY_LENS, SEQ_LENS = [11, 1, 4, 9], [15, 18, 11, 9]


def _batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    blocks = torch.randperm(NUM_BLOCKS, generator=generator).tolist()
    tables = [blocks[0:5], blocks[5:10], blocks[10:15], blocks[15:20]]
    q = torch.randn(sum(QUERY_LENS), HEADS, HEAD_DIM, generator=generator)
    latent = torch.randn(sum(QUERY_LENS), 1, HEAD_DIM, generator=generator)
    return q, latent, tables


@pytest.mark.parametrize("backend_class", BACKENDS, ids=lambda c: c.name)
@pytest.mark.parametrize("sliding_window", [None, 5])
@pytest.mark.parametrize("sinks", [False, True])
def test_one_plane_reads_as_two_planes_holding_the_vector_twice(backend_class, sliding_window, sinks):
    generator = torch.Generator().manual_seed(3)
    q, latent, tables = _batch(generator)
    cached = torch.randn(NUM_BLOCKS + 1, 1, BLOCK_SIZE, 1, HEAD_DIM, generator=generator)
    two_planes = torch.cat((cached, cached), dim=1)
    sink_logits = torch.randn(HEADS, generator=generator) if sinks else None
    expected = backend_class().forward(q, latent, latent, two_planes, _meta(tables), 0.3, sliding_window,
                                       sinks=sink_logits)
    got = backend_class().forward(q, latent, latent, cached, _meta(tables), 0.3, sliding_window, sinks=sink_logits)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(cached[:NUM_BLOCKS, 0], two_planes[:NUM_BLOCKS, 0])
    torch.testing.assert_close(two_planes[:NUM_BLOCKS, 1], two_planes[:NUM_BLOCKS, 0])


@pytest.mark.parametrize("backend_class", BACKENDS, ids=lambda c: c.name)
def test_values_other_than_the_keys_are_refused_for_one_plane(backend_class):
    generator = torch.Generator().manual_seed(4)
    q, latent, tables = _batch(generator)
    cached = torch.zeros(NUM_BLOCKS + 1, 1, BLOCK_SIZE, 1, HEAD_DIM)
    with pytest.raises(ValueError, match="v must be k"):
        backend_class().forward(q, latent, latent.clone(), cached, _meta(tables), 0.3)
    assert not cached.any(), "nothing written before the refusal"


def test_triton_refuses_a_one_plane_cache_by_name():
    pytest.importorskip("triton")
    from executor_svc.attention.triton_backend import TritonAttentionBackend

    generator = torch.Generator().manual_seed(5)
    q, latent, tables = _batch(generator)
    cached = torch.zeros(NUM_BLOCKS + 1, 1, BLOCK_SIZE, 1, HEAD_DIM)
    with pytest.raises(ValueError, match="kv_layer: .*1 plane"):
        TritonAttentionBackend().forward(q, latent, latent, cached, _meta(tables), 0.3)


def _meta(tables: list[list[int]]) -> AttentionMetadata:
    return AttentionMetadata.build(QUERY_LENS, SEQ_LENS, tables, BLOCK_SIZE, "cpu")
