"""Shared fixtures: model directories (tiny random checkpoints and the real default model) and stacks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Test helper modules (tiny checkpoints, tiny tokenizers) live beside the tests that own them;
# make them importable from every test directory, whichever subset pytest collects.
_TESTS_DIR = Path(__file__).parent
for _sub in ("executor_svc", "scheduler_svc", "fixtures"):
    if str(_TESTS_DIR / _sub) not in sys.path:
        sys.path.insert(0, str(_TESTS_DIR / _sub))


def pytest_configure(config):
    """Under pytest-xdist each worker gets one core: its own torch work and every process it starts (their
    torch reads OMP_NUM_THREADS unless a test passes --num-threads) use one thread, so workers do not fight."""
    from cpu_share import parallel_workers

    if parallel_workers() > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Long modules first; GPU tests skip cleanly without CUDA."""
    _long_modules_first(items)
    _skip_gpu_tests_without_cuda(items)


def _long_modules_first(items) -> None:
    """Modules with tests on the real default model, then modules that start processes, then the rest, each
    module kept whole and in order: pytest-xdist (--dist loadscope) then starts the long modules first instead
    of leaving one of them to run alone at the end."""
    rank: dict[Path, int] = {}
    for item in items:
        own = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("stack") else 2
        rank[item.path] = min(rank.get(item.path, 2), own)
    items.sort(key=lambda item: rank[item.path])


def _skip_gpu_tests_without_cuda(items) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random-weight Llama with a byte-level BPE tokenizer (vocab 400, EOS ids [2, 0])."""
    from tiny_models import make_tiny_llama
    from tiny_tokenizers import build_byte_level

    directory = tmp_path_factory.mktemp("tiny_llama")
    build_byte_level(directory)
    make_tiny_llama(directory, seed=0, vocab_size=400)
    return directory


@pytest.fixture(scope="session")
def tiny_draft_model_dir(tmp_path_factory) -> Path:
    """Another tiny Llama with the same tokenizer and different random weights."""
    from tiny_models import make_tiny_llama
    from tiny_tokenizers import build_byte_level

    directory = tmp_path_factory.mktemp("tiny_llama_other")
    build_byte_level(directory)
    make_tiny_llama(directory, seed=1, vocab_size=400)
    return directory


@pytest.fixture(scope="session")
def tiny_eagle_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """An EAGLE-style drafter trained for tiny_model_dir (draft vocabulary 200 of its 400 tokens)."""
    from tiny_drafter_training import train_tiny_drafter

    out = tmp_path_factory.mktemp("tiny_eagle")
    train_tiny_drafter(tiny_model_dir, out)
    return out


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The real default model (SmolLM2-135M-Instruct), converted once into the cache."""
    from client.model_resolver import resolve_model

    return resolve_model(None)


@pytest.fixture
def exporter():
    """An in-memory span exporter for tracing tests."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter):
    """An SDK tracer whose spans end up in ``exporter``, synchronously."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


@pytest.fixture
def taken_port():
    """A 127.0.0.1 port something else listens on for the test's duration."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
