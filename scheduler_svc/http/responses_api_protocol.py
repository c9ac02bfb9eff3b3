"""The request body of OpenAI's Responses API (``POST /v1/responses``), as far as stepahead serves it.

Served: ``model``, ``input`` (a string: one user message; or a list of items: messages with text content, function
calls, function call outputs and reasoning items; responses_api_input.py reads them), ``instructions`` (a system message
first), ``max_output_tokens``, ``temperature``, ``top_p``, function ``tools``, ``tool_choice``, ``parallel_tool_calls``,
``text.format`` (text, json_object, json_schema), ``reasoning.effort``, ``stream``, ``metadata``, ``user``, ``include:
["message.output_text.logprobs"]`` and ``top_logprobs`` (the answer's token logprobs, for outputs that are text alone:
not split by a --reasoning-parser, no tools offered). ``store`` (unset: true) keeps the response for
``previous_response_id``, which continues its conversation, and for retrieval (response_store.py); ``background``
(stored, not streamed) answers with the queued response and generates in the background; ``truncation`` may be
"disabled". Other fields are refused by name unless neutral (null, false, empty), as on the other endpoints
(unrecognized.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from scheduler_svc.http.protocol import Int32, _Strict


class TextFormat(_Strict):
    """``text.format``: free text, any JSON object, or JSON valid under a schema."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextOptions(_Strict):
    """``text``: the output's format."""

    format: TextFormat | None = None


class ReasoningOptions(_Strict):
    """``reasoning``: the effort a reasoning model's chat template is told (``summary`` is not served)."""

    effort: Literal["minimal", "low", "medium", "high"] | None = None


class FunctionTool(_Strict):
    """A tool of the Responses API: ``{"type": "function", "name", "description", "parameters", "strict"}``."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponsesPrompt(_Strict):
    """What a Responses request's prompt is made of: ``POST /v1/responses/input_tokens`` takes this alone."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    previous_response_id: str | None = None
    truncation: Literal["disabled", "auto"] | None = None


class ResponsesRequest(ResponsesPrompt):
    """``POST /v1/responses``."""

    input: str | list[dict[str, Any]]
    max_output_tokens: Int32 | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    """Answer at once with the queued response and generate in the background (fetched with GET
    /v1/responses/{id}, stopped with POST /v1/responses/{id}/cancel); needs the response stored, not streamed."""
    include: list[str] | None = None
    """Extra output to return: only ``message.output_text.logprobs`` is served."""
    top_logprobs: Int32 | None = None
    """Alternatives per output token (0..20) in the output text's logprobs (which it asks for too)."""
    metadata: dict[str, Any] | None = None
    user: str | None = None
