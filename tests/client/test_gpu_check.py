"""`stepahead gpu-check`: refuses to run without CUDA; the commands it runs exist and parse."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from client import cli, gpu_check
from client.gpu_check import GPU_TESTS, _bench_command, run_gpu_check

REPO = Path(__file__).parents[2]


def test_every_gpu_test_file_exists():
    assert all((REPO / path.split("::")[0]).is_file() for path in GPU_TESTS)


def test_a_failing_part_does_not_stop_the_later_ones(tmp_path, monkeypatch):
    ran = []

    def run_logged(command, log):
        ran.append(log.name)
        return 1 if log.name == "gpu-tests.log" else 0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "_run_logged", run_logged)
    args = cli._build_parser().parse_args(["gpu-check", "--out", str(tmp_path), "--shapes", "default", "small"])
    assert gpu_check.run_gpu_check(args) == 1
    assert ran == ["gpu-tests.log", "bench-default.log", "bench-small.log"]


@pytest.mark.parametrize("shape", ["default", "1.7b", "8b", "small", "moe"])
def test_bench_commands_parse_as_stepahead_bench(shape, tmp_path):
    command = _bench_command(shape, 128, tmp_path)
    args = cli._build_parser().parse_args(command[command.index("bench") :])
    assert (args.device, args.dtype, args.max_tokens, args.ignore_eos) == ("cuda", "bfloat16", 128, True)
    assert args.model_shape == (None if shape == "small" else shape) and args.small_model == (shape == "small")
    peers = {"default": ["eager", "compiled"], "small": ["eager", "compiled"], "1.7b": ["compiled"], "8b": [],
             "moe": ["eager"]}[shape]
    assert (args.no_hf, args.hf_peers) == ((False, peers) if peers else (True, ["eager", "compiled"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_it_exits_2_and_says_why(tmp_path, capsys):
    args = cli._build_parser().parse_args(["gpu-check", "--out", str(tmp_path)])
    assert run_gpu_check(args) == 2
    assert "CUDA" in capsys.readouterr().err


def test_by_default_every_shape_the_acceptance_names_is_benchmarked(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "_run_logged", lambda command, log: ran.append(log.name) or 0)
    assert gpu_check.run_gpu_check(cli._build_parser().parse_args(["gpu-check", "--out", str(tmp_path)])) == 0
    assert ran == ["gpu-tests.log", "bench-default.log", "bench-small.log", "bench-1.7b.log", "bench-8b.log"]
