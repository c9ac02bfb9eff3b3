"""Training prompts for a drafter, built offline and disjoint from every benchmark prompt set.

The kinds of request (their shares in SHARES): chat requests covering the kinds of task MT-Bench has
(writing, roleplay, reasoning, math, coding, extraction, STEM, humanities) through templates, topics and
personas written here, never MT-Bench's questions; arithmetic word problems with seeded numbers; summarise /
rewrite / question requests over passages of the Python documentation; and documentation and code requests
from standard-library modules that neither the code benchmark (stepahead_common.stdlib_prompts.CODE_MODULES)
nor the dynamic-K calibration set uses.
"""

from __future__ import annotations

import random

from executor_svc.drafter_training.prompt_material import (
    PASSAGE_TEMPLATES,
    PERSONA_ASKS,
    PERSONAS,
    TOPIC_TEMPLATES,
    TOPICS,
    documentation_passages,
    word_problems,
)
from stepahead_common.stdlib_prompts import CALIBRATION_MODULES, CODE_MODULES, docstrings, function_heads


def chat_requests() -> list[str]:
    """Every topic template filled with every topic, then every persona with every ask, in a fixed order."""
    filled = [template.format(topic=topic) for topic in TOPICS for template in TOPIC_TEMPLATES]
    roleplay = [f"Pretend to be {persona}. {ask}" for persona in PERSONAS for ask in PERSONA_ASKS]
    return filled + roleplay


def training_modules() -> list[str]:
    """Standard-library modules whose docstrings and functions the training set uses."""
    excluded = set(CODE_MODULES) | set(CALIBRATION_MODULES)
    candidates = ("collections", "contextlib", "datetime", "email.message", "http.client", "inspect",
                  "logging", "mailbox", "optparse", "os", "pickle", "queue", "shutil", "smtplib", "socket",
                  "sqlite3", "subprocess", "tempfile", "threading", "traceback", "typing", "urllib.parse",
                  "uuid", "wave", "xml.dom.minidom", "zipimport", "asyncio.tasks", "decimal", "locale", "selectors")
    return [name for name in candidates if name not in excluded]


def stdlib_requests(max_chars: int = 500, num_lines: int = 8) -> list[str]:
    """Explain-this-documentation and complete-this-function requests over training_modules()."""
    requests: list[str] = []
    for name in training_modules():
        requests += [f"Explain what this documentation says:\n\n{doc}" for doc in docstrings(name, max_chars)[:12]]
        requests += [f"Complete this Python function:\n\n```python\n{head}\n```"
                     for head in function_heads(name, num_lines)[:8]]
    return requests


def passage_requests(max_chars: int = 700) -> list[str]:
    """Summarise / rewrite / question / extract requests over passages of the Python documentation."""
    passages = documentation_passages(max_chars)
    return [PASSAGE_TEMPLATES[i % len(PASSAGE_TEMPLATES)].format(passage=passage)
            for i, passage in enumerate(passages)]


SHARES = (("chat", 0.55), ("math", 0.1), ("passage", 0.15), ("stdlib", 0.2))
"""The mix of request kinds in a training set; chat takes whatever the other kinds leave (0.55 when their
pools are large enough)."""


def training_requests(count: int, seed: int) -> list[str]:
    """``count`` requests drawn (seeded) from the kinds in SHARES, shuffled together."""
    rng = random.Random(seed)
    pools = {"chat": chat_requests(), "math": word_problems(rng, count), "passage": passage_requests(),
             "stdlib": stdlib_requests()}
    for pool in pools.values():
        rng.shuffle(pool)
    wanted = {kind: min(len(pools[kind]), round(count * share)) for kind, share in SHARES if kind != "chat"}
    wanted["chat"] = count - sum(wanted.values())
    mixed = [request for kind, number in wanted.items() for request in pools[kind][:number]]
    rng.shuffle(mixed)
    return mixed
