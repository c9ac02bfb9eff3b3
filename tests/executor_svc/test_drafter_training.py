"""`stepahead train-drafter` on a tiny checkpoint: it learns (held-out acceptance beats chance), it is
reproducible and resumable, and its data never includes the benchmark's prompts."""

from __future__ import annotations

import json

import pytest
from tiny_drafter_training import train_tiny_drafter

from client.mtbench import load_mtbench_first_turns
from executor_svc.drafter_training.prompts import training_modules, training_requests
from executor_svc.drafter_training.trainer import HeadTrainer
from stepahead_common.stdlib_prompts import CALIBRATION_MODULES, CODE_MODULES, code_prompts


def held_out_history(drafter_dir) -> list[dict]:
    return json.loads((drafter_dir / "config.json").read_text())["training"]["history"]


def test_trained_head_beats_chance_on_held_out_prompts(tiny_eagle_dir):
    history = held_out_history(tiny_eagle_dir)
    trained = history[-1]["held_out"]
    chance = 1 / 200  # a uniformly random draft from the 200-token draft vocabulary
    assert trained["chains"] > 100
    assert trained["per_position"][0] > 20 * chance
    assert trained["acceptance_length"] > 1.2
    assert history[-1]["loss"] < history[1]["loss"]  # history[0]: the untrained head's check


def test_same_seed_same_checkpoint_and_resume_is_exact(tiny_model_dir, tmp_path, monkeypatch):
    first, second, resumed = tmp_path / "first", tmp_path / "second", tmp_path / "resumed"
    train_tiny_drafter(tiny_model_dir, first, num_prompts=24)
    train_tiny_drafter(tiny_model_dir, second, num_prompts=24)
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()

    real_epoch = HeadTrainer.train_epoch

    def interrupted(self, train, deadline):
        if self.state.epoch == 1:
            raise KeyboardInterrupt
        return real_epoch(self, train, deadline)

    monkeypatch.setattr(HeadTrainer, "train_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_tiny_drafter(tiny_model_dir, resumed, num_prompts=24)
    assert not (resumed / "model.safetensors").exists() and (resumed / ".train" / "checkpoint.pt").is_file()
    monkeypatch.setattr(HeadTrainer, "train_epoch", real_epoch)
    train_tiny_drafter(tiny_model_dir, resumed, num_prompts=24)
    assert (resumed / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert not (resumed / ".train").exists()


def test_another_seed_gives_another_checkpoint(tiny_model_dir, tmp_path):
    train_tiny_drafter(tiny_model_dir, tmp_path / "a", num_prompts=16, epochs=1)
    train_tiny_drafter(tiny_model_dir, tmp_path / "b", seed=1, num_prompts=16, epochs=1)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != (tmp_path / "b" / "model.safetensors").read_bytes()


def test_training_prompts_are_disjoint_from_benchmark_and_calibration_prompts():
    requests = set(training_requests(2000, seed=0))
    assert len(requests) > 1000
    assert not requests & set(load_mtbench_first_turns())
    assert not requests & set(code_prompts(200))
    assert not set(training_modules()) & (set(CODE_MODULES) | set(CALIBRATION_MODULES))


def test_the_time_budget_stops_the_run_and_the_same_command_continues_it(tiny_model_dir, tmp_path):
    from executor_svc.drafter_training.run import DataSettings, TrainDrafterJob, train_drafter

    job = TrainDrafterJob(str(tiny_model_dir), str(tmp_path), minutes=1e-6,
                          data=DataSettings(num_prompts=16, held_out_prompts=4, max_new_tokens=16, draft_vocab_size=64))
    stopped = train_drafter(job)
    assert "run the same command again" in stopped["stopped"] and not (tmp_path / "model.safetensors").exists()
    other = TrainDrafterJob(str(tiny_model_dir), str(tmp_path), minutes=None,
                            data=DataSettings(num_prompts=17, held_out_prompts=4, max_new_tokens=16))
    with pytest.raises(ValueError, match="other settings"):
        train_drafter(other)
    from dataclasses import replace

    from executor_svc.drafter_training.trainer import TrainSettings

    summary = train_drafter(replace(job, minutes=None, train=TrainSettings(epochs=1)))
    assert "stopped" not in summary and (tmp_path / "model.safetensors").is_file()

