"""Training data by self-distillation: the target's own continuations, with its features and greedy choices.

The target runs through the executor's own model code and paged KV cache: a batch of prompts is prefilled
in one flattened forward, then decoded together. Each fed position p yields the target's feature f_p (its
final-normed hidden state) and, from the continuation on, its greedy choice after p (the label a greedy
verification checks a draft against). Continuations are greedy, or sampled at a temperature for variety.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache
from executor_svc.models.kv_layout import kv_layout

BLOCK_SIZE = 16


@dataclass
class DistillSequence:
    """One prompt and the target's continuation of it.

    features[p] is f_p for the fed positions p = 0 .. len(token_ids) - 2 (the last token is never fed);
    labels[p] is the target's argmax after position p, for p >= prompt_len - 1 (-1 before)."""

    token_ids: list[int]
    prompt_len: int
    features: torch.Tensor
    labels: torch.Tensor
    greedy: bool

    @property
    def num_fed(self) -> int:
        return len(self.token_ids) - 1


@dataclass
class _Growing:
    tokens: list[int]
    prompt_len: int
    greedy: bool
    table: list[int]
    features: list[torch.Tensor]
    labels: list[int]
    done: bool = False


class SelfDistiller:
    """Generates DistillSequences for batches of prompt token ids with the target model."""

    def __init__(self, model, device: torch.device, eos_token_ids: list[int], max_new_tokens: int,
                 temperature: float, max_batch_tokens: int) -> None:
        self.model = model
        self.device = device
        self.eos = set(eos_token_ids)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.max_batch_tokens = max_batch_tokens
        self._cache: PagedKVCache | None = None

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], greedy: list[bool], generator: torch.Generator
                 ) -> list[DistillSequence]:
        """Continue every prompt (greedy or sampled as flagged); seeded by ``generator``."""
        blocks_per_seq = -(-(max(map(len, prompts)) + self.max_new_tokens) // BLOCK_SIZE)
        cache = self._kv_cache(len(prompts) * blocks_per_seq)
        seqs = [_Growing(list(p), len(p), g, list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)), [], [])
                for i, (p, g) in enumerate(zip(prompts, greedy))]
        logits = self._prefill(seqs, cache)
        for _ in range(self.max_new_tokens):
            active = [s for s in seqs if not s.done]
            self._append_next(active, logits, generator)
            feeding = [s for s in active if not s.done]
            if not feeding:
                break
            logits = self._decode(feeding, cache)
        return [DistillSequence(s.tokens, s.prompt_len, torch.cat(s.features), self._labels(s), s.greedy)
                for s in seqs]

    def _kv_cache(self, num_blocks: int) -> PagedKVCache:
        config = self.model.config
        if self._cache is None or self._cache.num_blocks < num_blocks:
            layout = kv_layout(config)
            self._cache = layout.cache(config.num_hidden_layers, num_blocks, BLOCK_SIZE,
                                       self.model.embed_weight.dtype, self.device)
        return self._cache

    def _prefill(self, seqs: list[_Growing], cache: PagedKVCache) -> torch.Tensor:
        """Feed every prompt in chunks of at most max_batch_tokens; logits [len(seqs), vocab] of the last rows."""
        last_logits: list[torch.Tensor] = []
        chunk: list[_Growing] = []
        for seq in seqs:
            if chunk and sum(len(s.tokens) for s in chunk) + len(seq.tokens) > self.max_batch_tokens:
                last_logits.append(self._prefill_chunk(chunk, cache))
                chunk = []
            chunk.append(seq)
        last_logits.append(self._prefill_chunk(chunk, cache))
        return torch.cat(last_logits)

    def _prefill_chunk(self, seqs: list[_Growing], cache: PagedKVCache) -> torch.Tensor:
        host = HostBatch(BLOCK_SIZE)
        firsts = [host.add_sequence(s.tokens, 0, s.table) for s in seqs]
        hidden = self._forward(host, cache)
        for seq, first in zip(seqs, firsts):
            seq.features.append(hidden[first : first + len(seq.tokens)].float().clone())
        last_rows = torch.tensor([first + len(s.tokens) - 1 for s, first in zip(seqs, firsts)], device=self.device)
        return self.model.compute_logits(hidden.index_select(0, last_rows))

    def _decode(self, seqs: list[_Growing], cache: PagedKVCache) -> torch.Tensor:
        host = HostBatch(BLOCK_SIZE)
        for seq in seqs:
            host.add_sequence(seq.tokens[-1:], len(seq.tokens) - 1, seq.table)
        hidden = self._forward(host, cache)
        for row, seq in enumerate(seqs):
            seq.features.append(hidden[row : row + 1].float().clone())
        return self.model.compute_logits(hidden)

    def _forward(self, host: HostBatch, cache: PagedKVCache) -> torch.Tensor:
        input_ids, positions, meta = host.to_device(self.device)
        return self.model(input_ids, positions, meta, cache)

    def _append_next(self, seqs: list[_Growing], logits: torch.Tensor, generator: torch.Generator) -> None:
        """Record each sequence's greedy label, then append its next token (greedy or sampled)."""
        argmax = logits.argmax(dim=-1).tolist()
        sampling = [row for row, seq in enumerate(seqs) if not seq.greedy]
        drawn = iter(sample_rows(logits[sampling], self.temperature, generator) if sampling else [])
        for seq, best in zip(seqs, argmax):
            seq.labels.append(best)
            token = best if seq.greedy else next(drawn)
            seq.tokens.append(token)
            if token in self.eos or len(seq.tokens) - seq.prompt_len >= self.max_new_tokens:
                seq.done = True

    @staticmethod
    def _labels(seq: _Growing) -> torch.Tensor:
        """-1 for prompt positions before the last, then the greedy label of every fed position."""
        labels = torch.full((len(seq.tokens) - 1,), -1, dtype=torch.int64)
        labels[seq.prompt_len - 1 :] = torch.tensor(seq.labels, dtype=torch.int64)
        return labels


def sample_rows(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> list[int]:
    """One token per row of ``logits`` [n, vocab], drawn from softmax(logits / temperature) by inverting its
    cumulative distribution at one seeded uniform per row (``generator`` is a CPU generator).

    torch.multinomial draws an exponential variate per vocabulary entry; over 49k entries, for every row, that
    made self-distillation 1.10x slower on a 2-core CPU (bench/README.md, 2026-11-27). One uniform per row draws
    from the same distribution."""
    probs = torch.softmax(logits.float() / temperature, dim=-1).cpu()
    cdf = probs.cumsum(dim=-1)
    uniform = torch.rand((probs.shape[0], 1), generator=generator) * cdf[:, -1:]
    drawn = torch.searchsorted(cdf, uniform, right=True).clamp_(max=probs.shape[1] - 1)
    return drawn.squeeze(1).tolist()
