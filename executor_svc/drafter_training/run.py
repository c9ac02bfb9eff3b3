"""The `stepahead train-drafter` pipeline: prompts -> self-distilled data -> draft vocabulary -> training.

Everything lands in ``<out>/.train`` first (data chunks, the held-out set, a per-epoch checkpoint and the
settings they were made with), so a run stopped by --minutes or interrupted continues where it stopped
when the same command runs again. The result is ``<out>/config.json`` + ``<out>/model.safetensors``.
The same settings, seed and data give the same checkpoint (on the same device and thread count).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from executor_svc.drafter_training.dataset import (
    draft_vocabulary,
    label_to_draft_map,
    load_sequences,
    save_sequences,
)
from executor_svc.drafter_training.prompts import training_requests
from executor_svc.drafter_training.self_distill import DistillSequence, SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafters.eagle_head import EagleHead, EagleHeadConfig, save_head
from executor_svc.drafters.shipped import target_probe

WORK_DIR = ".train"


@dataclass(frozen=True)
class DataSettings:
    """How the self-distilled set is made."""

    num_prompts: int = 1024
    held_out_prompts: int = 32
    max_new_tokens: int = 128
    max_prompt_tokens: int = 320
    temperature: float = 0.7
    sampled_every: int = 3
    """Every n-th training prompt is continued by sampling at ``temperature`` (the others greedily)."""
    generate_batch: int = 64
    draft_vocab_size: int = 4096

    def __post_init__(self) -> None:
        for name in ("num_prompts", "held_out_prompts", "max_new_tokens", "max_prompt_tokens", "generate_batch",
                     "draft_vocab_size", "sampled_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class TrainDrafterJob:
    """One `stepahead train-drafter` run."""

    model_dir: str
    out_dir: str
    seed: int = 0
    minutes: float | None = 30.0
    data: DataSettings = DataSettings()
    train: TrainSettings = TrainSettings()
    device: str = "cpu"
    keep_work: bool = False

    def identity(self) -> dict:
        """What the saved data depends on; a resumed run must match it (the checkpoint also has to match the
        training settings, else training starts over on the same data)."""
        return {"model_dir": str(Path(self.model_dir).resolve()), "seed": self.seed, "data": asdict(self.data),
                "device": self.device}


def train_drafter(job: TrainDrafterJob) -> dict:
    """Run (or resume) the job; returns the summary written into the drafter's config."""
    from executor_svc.attention.selection import build_attention_backend
    from executor_svc.model_loader import load_hf_config, load_model
    from executor_svc.server import eos_token_ids

    started = time.monotonic()
    deadline = started + job.minutes * 60 if job.minutes else None
    work = _work_dir(job)
    device = torch.device(job.device)
    hf_config = load_hf_config(job.model_dir)
    model = load_model(job.model_dir, torch.float32, device, build_attention_backend("torch", device))
    distiller = SelfDistiller(model, device, eos_token_ids(job.model_dir, hf_config), job.data.max_new_tokens,
                              job.data.temperature, max_batch_tokens=4096)
    train, held_out = _self_distilled(job, distiller, work, deadline)
    if train is None or held_out is None:
        return _stopped(job, "while generating the training data")
    draft_vocab, coverage = draft_vocabulary(train, job.data.draft_vocab_size, hf_config.vocab_size)
    torch.manual_seed(job.seed)
    head = EagleHead(hf_config, job.data.draft_vocab_size).to(device)
    head.draft_vocab.copy_(draft_vocab)
    head.initialise(job.seed)
    trainer = HeadTrainer(head, model, label_to_draft_map(draft_vocab, hf_config.vocab_size), job.train, job.seed)
    checkpoint = work / "checkpoint.pt"
    if checkpoint.is_file() and trainer.load_checkpoint(checkpoint):
        tqdm.write(f"resuming after epoch {trainer.state.epoch}")
    else:
        untrained = trainer.held_out_acceptance(held_out)
        trainer.state.history.append({"epoch": 0, "held_out": asdict(untrained)})
        tqdm.write(f"untrained head: held-out {untrained.describe()}")
    while trainer.state.epoch < job.train.epochs:
        if not trainer.train_epoch(train, deadline):
            return _stopped(job, f"in epoch {trainer.state.epoch + 1}")
        acceptance = trainer.held_out_acceptance(held_out)
        trainer.state.history[-1]["held_out"] = asdict(acceptance)
        tqdm.write(f"epoch {trainer.state.epoch}: held-out {acceptance.describe()}")
        trainer.save_checkpoint(checkpoint)
    summary = _summary(job, train, held_out, coverage, trainer, time.monotonic() - started)
    for param in head.parameters():
        param.requires_grad_(False)
    config = EagleHeadConfig.for_target(hf_config, job.data.draft_vocab_size, job.seed, target_probe(model), summary)
    save_head(head, config, Path(job.out_dir))
    if not job.keep_work:
        shutil.rmtree(work)
    return summary


def _work_dir(job: TrainDrafterJob) -> Path:
    """<out>/.train, created with the job's identity, or checked against it when resuming."""
    work = Path(job.out_dir) / WORK_DIR
    identity_file = work / "job.json"
    if identity_file.is_file():
        saved = json.loads(identity_file.read_text())
        if saved != job.identity():
            raise ValueError(f"out: {work} holds a run with other settings ({saved}); "
                             "use another --out or delete it to start over")
    else:
        work.mkdir(parents=True, exist_ok=True)
        identity_file.write_text(json.dumps(job.identity(), indent=2) + "\n")
    return work


def _self_distilled(job: TrainDrafterJob, distiller: SelfDistiller, work: Path, deadline: float | None
                    ) -> tuple[list[DistillSequence] | None, list[DistillSequence] | None]:
    """The training and held-out sequences, generating the chunks not on disk yet; (None, None) when the
    deadline passes first."""
    sequences = self_distill_chunks(distiller, _prompt_ids(job), job.data, job.seed, work, deadline)
    if sequences is None:
        return None, None
    return sequences[: job.data.num_prompts], sequences[job.data.num_prompts :]


def self_distill_chunks(distiller: SelfDistiller, prompts: list[list[int]], settings: DataSettings, seed: int,
                        work: Path, deadline: float | None) -> list[DistillSequence] | None:
    """Continue ``prompts`` in chunks of ``settings.generate_batch``, each saved as ``work/data-NNNN.pt`` and read
    back when already there; every ``sampled_every``-th of the first ``num_prompts`` is sampled, the rest (the
    held-out ones included) greedy. None when the deadline passes before all chunks are on disk."""
    generator = torch.Generator()
    chunks = [prompts[i : i + settings.generate_batch] for i in range(0, len(prompts), settings.generate_batch)]
    sequences: list[DistillSequence] = []
    for index, chunk in enumerate(tqdm(chunks, desc="self-distilling", unit="batch")):
        path = work / f"data-{index:04d}.pt"
        # Each chunk's sampling is seeded by its index, so a resumed run draws what an uninterrupted one does.
        generator.manual_seed(seed * 100_003 + index)
        if not path.is_file():
            if deadline is not None and time.monotonic() > deadline:
                return None
            greedy = [(i + index * settings.generate_batch) % settings.sampled_every != settings.sampled_every - 1
                      or (i + index * settings.generate_batch) >= settings.num_prompts for i in range(len(chunk))]
            save_sequences(distiller.generate(chunk, greedy, generator), path)
        sequences += load_sequences(path)
    return sequences


def _prompt_ids(job: TrainDrafterJob) -> list[list[int]]:
    """Chat-formatted token ids of the training prompts then the held-out ones (too-long prompts skipped)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job.model_dir)
    wanted = job.data.num_prompts + job.data.held_out_prompts
    ids: list[list[int]] = []
    for text in training_requests(2 * wanted, job.seed):
        tokens = chat_prompt_ids(tokenizer, text)
        if 0 < len(tokens) <= job.data.max_prompt_tokens:
            ids.append(tokens)
        if len(ids) == wanted:
            return ids
    raise ValueError(f"num_prompts: only {len(ids)} training prompts fit max_prompt_tokens "
                     f"{job.data.max_prompt_tokens}, {wanted} wanted")


def chat_prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """One user request's token ids as the model's chat template formats it (the bare text's without one)."""
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": text}]
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=False))
    return list(tokenizer(text)["input_ids"])


def _summary(job: TrainDrafterJob, train: list[DistillSequence], held_out: list[DistillSequence],
             coverage: float, trainer: HeadTrainer, seconds: float) -> dict:
    return {
        "data": {**asdict(job.data), "train_sequences": len(train), "held_out_sequences": len(held_out),
                 "train_tokens": sum(len(s.token_ids) for s in train),
                 "continuation_tokens": sum(len(s.token_ids) - s.prompt_len for s in train),
                 "draft_vocab_coverage": round(coverage, 4)},
        "train": asdict(job.train),
        "history": trainer.state.history,
        "device": job.device,
        "threads": torch.get_num_threads(),
        "last_run_seconds": round(seconds, 1),
    }


def _stopped(job: TrainDrafterJob, where: str) -> dict:
    message = (f"stopped at the --minutes {job.minutes} budget {where}; the work so far is in "
               f"{Path(job.out_dir) / WORK_DIR}: run the same command again to continue")
    tqdm.write(message)
    return {"stopped": message}
