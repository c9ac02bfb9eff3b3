"""Training prompts for a drafter, built offline and disjoint from every benchmark prompt set.

Chat requests cover the kinds of task MT-Bench has (writing, roleplay, reasoning, math, coding, extraction,
STEM, humanities) through templates filled with topics written here, never MT-Bench's questions; code and
documentation requests come from standard-library modules that neither the code benchmark
(stepahead_common.stdlib_prompts.CODE_MODULES) nor the dynamic-K calibration set uses.
"""

from __future__ import annotations

import random

from stepahead_common.stdlib_prompts import CALIBRATION_MODULES, CODE_MODULES, docstrings, function_heads

TEMPLATES = (
    "Write a short blog post about {topic}.",
    "Write a poem about {topic}.",
    "Write a persuasive email to a friend about {topic}.",
    "Describe {topic} to a ten-year-old.",
    "Pretend you are a tour guide and talk about {topic}.",
    "Imagine you are a journalist interviewing an expert on {topic}. Write the first three questions and answers.",
    "What are the main advantages and disadvantages of {topic}?",
    "Give me five tips related to {topic}.",
    "Explain step by step how {topic} works.",
    "Summarise the history of {topic} in a few paragraphs.",
    "List three common misconceptions about {topic} and correct them.",
    "Compare {topic} with something similar and explain the differences.",
    "Write a short story in which {topic} plays an important role.",
    "What questions should a beginner ask about {topic}?",
    "Create a simple lesson plan for teaching {topic}.",
    "Write a Python function related to {topic} and explain it.",
    "Extract the key facts about {topic} as a JSON object with three fields.",
    "Solve a simple math word problem about {topic}, showing each step.",
)

TOPICS = (
    "renewable energy", "the water cycle", "machine learning", "the French revolution", "photosynthesis",
    "remote work", "electric cars", "the human immune system", "coffee", "the stock market", "volcanoes",
    "social media", "the Roman empire", "black holes", "healthy sleep", "recycling", "the printing press",
    "chess", "climate change", "public libraries", "vaccines", "the internet", "honey bees", "jazz music",
    "the moon landing", "budgeting money", "learning a new language", "ancient Egypt", "solar panels",
    "rainforests", "the theory of evolution", "city parks", "marathon training", "3D printing",
    "the Renaissance", "ocean tides", "cryptography", "baking bread", "the Olympic games", "earthquakes",
    "democracy", "smartphones", "quantum computing", "gardening", "the Great Wall of China", "time management",
    "plate tectonics", "public transport", "video games", "the periodic table", "sorting algorithms",
    "prime numbers", "interest rates", "probability", "job interviews", "bicycles", "mountain climbing",
    "friendship", "nutrition", "the solar system",
)


def chat_requests() -> list[str]:
    """Every template filled with every topic, in a fixed order."""
    return [template.format(topic=topic) for topic in TOPICS for template in TEMPLATES]


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


def training_requests(count: int, seed: int) -> list[str]:
    """``count`` requests drawn (seeded) from chat_requests() and stdlib_requests(), two chat for one stdlib."""
    rng = random.Random(seed)
    chat, stdlib = chat_requests(), stdlib_requests()
    rng.shuffle(chat)
    rng.shuffle(stdlib)
    num_stdlib = min(len(stdlib), count // 3)
    mixed = chat[: count - num_stdlib] + stdlib[:num_stdlib]
    rng.shuffle(mixed)
    return mixed
