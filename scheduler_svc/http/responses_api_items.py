"""A Responses request's own input as the items ``GET /v1/responses/{id}/input_items`` lists (OpenAI's item shapes,
each with an ``id``): a string input is one user message; a message's string content becomes one text part
(``input_text``, or an assistant's ``output_text``); function calls, their outputs and reasoning items keep their
fields, gaining an id (``msg_``, ``fc_``, ``fco_``, ``rs_``) and a ``completed`` status where they have none."""

from __future__ import annotations

import secrets
from typing import Any

from scheduler_svc.http.responses_api_protocol import ResponsesPrompt

_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def listed_input_items(body: ResponsesPrompt) -> tuple[dict[str, Any], ...]:
    """The request's input items as listed (its input has been read already: every item is one it serves)."""
    if body.input is None:
        return ()
    if isinstance(body.input, str):
        return (_message({"role": "user", "content": body.input}),)
    return tuple(_listed(item) for item in body.input)


def _listed(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message(item)
    listed = {**item, "type": kind, "id": item.get("id") or _new_id(str(kind))}
    if kind != "reasoning":
        listed.setdefault("status", "completed")
    else:
        listed.setdefault("summary", [])
    return listed


def _message(item: dict[str, Any]) -> dict[str, Any]:
    assistant = item["role"] == "assistant"
    content = item["content"]
    if isinstance(content, str):
        content = [{"type": "output_text", "text": content, "annotations": []} if assistant
                   else {"type": "input_text", "text": content}]
    return {"id": item.get("id") or _new_id("message"), "type": "message", "role": item["role"],
            "content": content, "status": item.get("status") or "completed"}


def _new_id(kind: str) -> str:
    return f"{_ID_PREFIXES[kind]}_{secrets.token_hex(12)}"
