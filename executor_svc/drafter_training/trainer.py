"""Training the head on the self-distilled set: seeded, resumable per epoch, with a held-out acceptance check."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from executor_svc.drafter_training.dataset import batches, pack
from executor_svc.drafter_training.self_distill import DistillSequence
from executor_svc.drafter_training.unrolled import step_losses, unrolled_forward
from executor_svc.drafters.eagle_head import EagleHead


@dataclass(frozen=True)
class TrainSettings:
    """The optimisation: what the checkpoint depends on besides the data and the seed."""

    epochs: int = 3
    learning_rate: float = 1e-3
    batch_entries: int = 512
    num_steps: int = 3
    """Draft steps unrolled in training (and in the held-out check)."""
    feature_weight: float = 0.2
    input_noise: float = 0.05
    warmup_batches: int = 20

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_entries", "num_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")


@dataclass
class HeldOutAcceptance:
    """Greedy drafting on held-out sequences: per-position acceptance and the mean acceptance length."""

    per_position: list[float]
    acceptance_length: float
    chains: int

    def describe(self) -> str:
        rates = " ".join(f"{rate:.2f}" for rate in self.per_position)
        return f"acceptance length {self.acceptance_length:.2f} at K={len(self.per_position)} (per position {rates})"


@dataclass
class TrainState:
    """What a resumed run continues from."""

    epoch: int = 0
    history: list[dict] = field(default_factory=list)


class HeadTrainer:
    """Trains ``head`` (its own weights only; the target's embedding and LM head rows stay frozen)."""

    def __init__(self, head: EagleHead, model, label_to_draft: torch.Tensor, settings: TrainSettings, seed: int):
        self.head = head
        self.settings = settings
        self.seed = seed
        self.embed = model.embed_weight.detach().float()
        self.lm_rows = model.lm_head_weight.detach().float()[head.draft_vocab]
        self.cos, self.sin = model.rope_cos.float(), model.rope_sin.float()
        self.label_to_draft = label_to_draft
        for param in head.parameters():
            param.requires_grad_(True)
        self.optimizer = torch.optim.AdamW(head.parameters(), lr=settings.learning_rate, weight_decay=0.0)
        self.state = TrainState()

    def _learning_rate(self, batch_index: int, total: int) -> float:
        """Linear warm-up, then linear decay to a tenth."""
        peak = self.settings.learning_rate
        if batch_index < self.settings.warmup_batches:
            return peak * (batch_index + 1) / self.settings.warmup_batches
        done = (batch_index - self.settings.warmup_batches) / max(1, total - self.settings.warmup_batches)
        return peak * (1.0 - 0.9 * done)

    def train_epoch(self, train: list[DistillSequence], deadline: float | None) -> bool:
        """One epoch (seeded by seed and epoch); False when the deadline passed first (nothing kept of it)."""
        epoch = self.state.epoch
        groups = batches(train, self.settings.batch_entries, random.Random(self.seed * 1000 + epoch))
        generator = torch.Generator().manual_seed(self.seed * 1000 + epoch)
        total = self.settings.epochs * len(groups)
        agreement = [[0, 0] for _ in range(self.settings.num_steps)]
        loss_sum = 0.0
        progress = tqdm(groups, desc=f"epoch {epoch + 1}/{self.settings.epochs}", unit="batch")
        for index, group in enumerate(progress):
            if deadline is not None and time.monotonic() > deadline:
                progress.close()
                return False
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = self._learning_rate(epoch * len(groups) + index, total)
            batch = pack(group)
            outputs = unrolled_forward(self.head, batch, self.embed, self.lm_rows, self.cos, self.sin,
                                       self.settings.num_steps, self.settings.input_noise, generator)
            loss, counts = step_losses(outputs, batch, self.label_to_draft, self.settings.feature_weight)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
            self.optimizer.step()
            loss_sum += float(loss.detach())
            for step, (correct, counted) in enumerate(counts):
                agreement[step][0] += correct
                agreement[step][1] += counted
            progress.set_postfix(loss=f"{loss_sum / (index + 1):.3f}",
                                 top1="/".join(f"{c / max(1, n):.2f}" for c, n in agreement))
        self.state.epoch += 1
        self.state.history.append({"epoch": self.state.epoch, "loss": loss_sum / max(1, len(groups)),
                                   "train_top1_per_step": [c / max(1, n) for c, n in agreement]})
        return True

    @torch.no_grad()
    def held_out_acceptance(self, held_out: list[DistillSequence]) -> HeldOutAcceptance:
        """Greedy drafting of num_steps tokens after every continuation position of the held-out (greedy)
        sequences, the chain stopping at the first draft the target's greedy choice rejects."""
        accepted_at = [0] * self.settings.num_steps
        chains = 0
        for group in batches(held_out, self.settings.batch_entries, random.Random(0)):
            batch = pack(group)
            outputs = unrolled_forward(self.head, batch, self.embed, self.lm_rows, self.cos, self.sin,
                                       self.settings.num_steps)
            alive = (batch.remaining >= self.settings.num_steps) & (batch.labels[outputs[0].targets] >= 0)
            chains += int(alive.sum())
            for step, out in enumerate(outputs):
                drafts = self.head.draft_vocab[out.logits.argmax(-1)]
                alive = alive & (drafts == batch.labels[out.targets])
                accepted_at[step] += int(alive.sum())
        per_position = []
        previous = chains
        for accepted in accepted_at:
            per_position.append(accepted / max(1, previous))
            previous = accepted
        length = 1.0 + sum(accepted_at) / max(1, chains)
        return HeldOutAcceptance(per_position, length, chains)

    def save_checkpoint(self, path: Path) -> None:
        """Head, optimizer and progress, for --resume (atomic)."""
        scratch = path.with_suffix(".partial")
        torch.save({"settings": asdict(self.settings), "head": self.head.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "epoch": self.state.epoch, "history": self.state.history}, scratch)
        scratch.replace(path)

    def load_checkpoint(self, path: Path) -> bool:
        """Continue from a checkpoint made with the same settings; False (nothing loaded) otherwise."""
        saved = torch.load(path, weights_only=True)
        if saved.get("settings") != asdict(self.settings):
            tqdm.write(f"{path} was made with other training settings: training starts over")
            return False
        self.head.load_state_dict(saved["head"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.state = TrainState(saved["epoch"], list(saved["history"]))
        return True
