"""The request body of Anthropic's Messages API (``POST /v1/messages``), as far as stepahead serves it.

Served: ``model``, ``messages`` (user and assistant turns; content a string or text, tool_use, tool_result and
thinking blocks: messages_api_input.py), ``system``, ``max_tokens`` (required, as Anthropic's), ``temperature``,
``top_p``, ``top_k``, ``stop_sequences``, ``stream``, ``tools`` (client tools: ``name``, ``description``,
``input_schema``), ``tool_choice``, ``output_config`` (``format``: a JSON schema the output follows; ``effort``:
low, medium or high, told to the chat template as ``reasoning_effort``) and ``metadata``. ``thinking``: "adaptive"
(a reasoning model thinks as its chat template says, its thinking coming back as thinking blocks, or left out with
``display: "omitted"``) or "disabled" (the template is told ``enable_thinking: false``, which Qwen3-style templates
read) or "enabled" (the template is told ``enable_thinking: true``, and the thinking ends after at most
``budget_tokens``, less than ``max_tokens``: chat's ``thinking_token_budget``). ``cache_control`` (``{"type":
"ephemeral"}``, ``ttl`` "5m" or "1h"), on the request, a tool or a content block, is accepted and changes nothing:
the server's prefix cache keeps every prompt's blocks by itself, and ``usage.cache_read_input_tokens`` counts the
prompt tokens it found there. Other fields are refused by name unless
neutral (null, false, empty), as on the other endpoints (unrecognized.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from scheduler_svc.http.protocol import Int32, _Strict


class CacheControl(_Strict):
    """``cache_control``: a prompt caching breakpoint, a hint this server's automatic prefix cache does not need."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class AnthropicTool(_Strict):
    """A client tool: its name, description and the JSON Schema of its input."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    """Absent or "custom": a client tool (Anthropic's server tools, web search and such, are not served)."""
    cache_control: CacheControl | None = None


class JsonOutputFormat(_Strict):
    """``output_config.format``: the output is JSON valid under ``schema``."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    """``output_config``: the output's format and the effort the chat template is told."""

    format: JsonOutputFormat | None = None
    effort: Literal["low", "medium", "high"] | None = None


class ThinkingConfig(_Strict):
    """``thinking``: "adaptive" (as the chat template says), "disabled", or "enabled" with a budget of tokens."""

    type: Literal["adaptive", "disabled", "enabled"]
    display: Literal["summarized", "omitted"] | None = None
    budget_tokens: Int32 | None = None


class MessagesPrompt(_Strict):
    """What a Messages request's prompt is made of: ``POST /v1/messages/count_tokens`` takes this alone."""

    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    cache_control: CacheControl | None = None


class MessagesRequest(MessagesPrompt):
    """``POST /v1/messages``."""

    max_tokens: Int32
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int32 | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    output_config: OutputConfig | None = None
    metadata: dict[str, Any] | None = None
