"""The benchmark's prompt sets: MT-Bench first turns, or code completions of Python stdlib functions."""

from __future__ import annotations

PROMPT_SETS = ("mtbench", "code")


def load_prompts(kind: str) -> list[str]:
    """mtbench: MT-Bench first turns (client/mtbench.py); code: complete the first lines of stdlib
    functions (stepahead_common/stdlib_prompts.py; never the profile's calibration prompts)."""
    if kind == "code":
        from stepahead_common.stdlib_prompts import code_prompts

        return code_prompts()
    if kind != "mtbench":
        raise ValueError(f"prompts: must be one of {PROMPT_SETS}, got {kind!r}")
    from client.mtbench import load_mtbench_first_turns

    return load_mtbench_first_turns()
