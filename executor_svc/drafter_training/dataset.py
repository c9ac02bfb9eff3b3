"""The self-distilled training set: packing sequences into batches, the draft vocabulary, and saving it."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import torch

from executor_svc.drafter_training.self_distill import DistillSequence
from executor_svc.drafter_training.unrolled import PackedBatch


def draft_vocabulary(sequences: list[DistillSequence], size: int, vocab_size: int) -> tuple[torch.Tensor, float]:
    """The ``size`` target ids the target chooses most often (ties: lower id first), and the share of all
    its greedy choices in the data they cover."""
    counts: Counter[int] = Counter()
    for seq in sequences:
        counts.update(label for label in seq.labels.tolist() if label >= 0)
    ranked = sorted(counts, key=lambda token: (-counts[token], token))[:size]
    if len(ranked) < size:  # fill up with the lowest ids not seen, so the size is what was asked
        seen = set(ranked)
        ranked += [token for token in range(vocab_size) if token not in seen][: size - len(ranked)]
    covered = sum(counts[token] for token in ranked[:size]) / max(1, sum(counts.values()))
    return torch.tensor(ranked, dtype=torch.int64), covered


def label_to_draft_map(draft_vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int64 [vocab]: each target id's index in the draft vocabulary, -1 where it has none."""
    mapping = torch.full((vocab_size,), -1, dtype=torch.int64)
    mapping[draft_vocab] = torch.arange(draft_vocab.numel())
    return mapping


def pack(sequences: list[DistillSequence]) -> PackedBatch:
    """Entries j = 0 .. num_fed - 1 of every sequence, back to back."""
    features, tokens, positions, seq_ids, remaining, labels = [], [], [], [], [], []
    for i, seq in enumerate(sequences):
        m = seq.num_fed
        features.append(seq.features)
        tokens.append(torch.tensor(seq.token_ids[1:], dtype=torch.int64))
        positions.append(torch.arange(m))
        seq_ids.append(torch.full((m,), i, dtype=torch.int64))
        remaining.append(torch.arange(m - 1, -1, -1))
        labels.append(seq.labels)
    return PackedBatch(torch.cat(features), torch.cat(tokens), torch.cat(positions), torch.cat(seq_ids),
                       torch.cat(remaining), torch.cat(labels))


def batches(sequences: list[DistillSequence], max_entries: int, rng: random.Random) -> list[list[DistillSequence]]:
    """Shuffled groups of sequences of at most ``max_entries`` entries (a longer sequence alone)."""
    order = list(sequences)
    rng.shuffle(order)
    groups: list[list[DistillSequence]] = []
    current: list[DistillSequence] = []
    size = 0
    for seq in order:
        if current and size + seq.num_fed > max_entries:
            groups.append(current)
            current, size = [], 0
        current.append(seq)
        size += seq.num_fed
    if current:
        groups.append(current)
    return groups


def save_sequences(sequences: list[DistillSequence], path: Path) -> None:
    """Write a chunk of the training set (atomically: a partial file never looks complete)."""
    scratch = path.with_suffix(".partial")
    torch.save([(s.token_ids, s.prompt_len, s.features.half(), s.labels, s.greedy) for s in sequences], scratch)
    scratch.replace(path)


def load_sequences(path: Path) -> list[DistillSequence]:
    """A chunk written by save_sequences (features back in fp32)."""
    rows = torch.load(path, weights_only=True)
    return [DistillSequence(list(tokens), prompt_len, features.float(), labels, greedy)
            for tokens, prompt_len, features, labels, greedy in rows]
