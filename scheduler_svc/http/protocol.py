"""Request bodies of the OpenAI-compatible API, as pydantic models.

Strict types (a string where a number belongs is refused, not coerced). Unknown fields are kept
(``model_extra``) so that conversion.py can refuse them, as OpenAI's own server does, unless their
value is neutral (null, false, empty): a client that echoes a reply's message back (``refusal:
null``, ``tool_calls: []``) still works, and nothing a client asked for is silently dropped. Fields
OpenAI defines but stepahead cannot honour (functions, store, ...) are likewise accepted only at their
neutral value, naming the parameter otherwise. vLLM's sampling extensions (top_k, min_p,
repetition_penalty, min_tokens, ignore_eos, stop_token_ids, skip_special_tokens,
include_stop_str_in_output, allowed_token_ids, bad_words) and its ``truncate_prompt_tokens`` (keep only the prompt's
last N tokens, after the chat template; -1: as many as the context allows) are accepted on both endpoints; null or
an empty list sets none. ``allowed_token_ids`` (only these ids may be sampled, EOS included) and ``bad_words``
(words never generated) go with no structured output format or forcing tool_choice. With ``echo``, a truncated
prompt is echoed as the text of the tokens kept (what the model read), and its ``logprobs`` and ``prompt_logprobs``
score those tokens.

Prompt scoring: vLLM's ``prompt_logprobs`` (0..20, both endpoints, not with ``stream``, as vLLM refuses it there)
returns the logprob of every prompt token after the first plus that many top alternatives, as vLLM shapes them
(responses.py); OpenAI's ``echo`` (completions) puts the prompt before each choice's text and, with ``logprobs``,
its tokens' logprobs before the output's (streamed too: the first chunk of a choice carries the prompt).

Structured output (guided decoding), on both endpoints as vLLM serves it: ``response_format`` (OpenAI's
``{"type": "text"}``, free text; ``{"type": "json_object"}``; ``{"type": "json_schema", "json_schema": {"name": ...,
"schema": {...}, "description": ..., "strict": ...}}``, ``name`` and ``schema`` required, ``strict`` and
``description`` accepted and changing nothing: the schema is always enforced) and vLLM's ``guided_json`` (a schema
object or its JSON text), ``guided_regex``, ``guided_choice`` (a list of strings) and ``guided_grammar`` (Lark or
GBNF), or vLLM's newer ``structured_outputs`` object (``json``, ``regex``, ``choice``, ``grammar``, ``json_object``;
its tuning keys are refused unless neutral). At most one may be set; null, an empty string or an empty list sets none
(an empty ``guided_json`` object is the schema ``{}``: any JSON value). vLLM's other guided decoding options
(``guided_decoding_backend``, ``guided_whitespace_pattern``, ``structural_tag``) are refused.

Tool calling (chat), as vLLM serves it (tools.py): ``tools`` (function tools) with ``tool_choice`` a named function
(the output is that function's arguments, constrained to its ``parameters``) or "required" (a JSON array of calls,
constrained to the tools' schemas); "none" generates free text without showing the tools to the template; "auto"
(the default with ``tools``) generates free text the calls are parsed from, in the model's own syntax, given by the
server's ``--tool-call-parser`` (refused without it). Messages may carry an assistant's ``tool_calls`` and a tool's
``tool_call_id``, which the chat template receives.

Thinking (chat, with the server's ``--reasoning-parser``: scheduler_svc/reasoning/, responses.py): vLLM's
``include_reasoning`` (false: the thinking is left out of the response); an assistant message may carry its earlier
thinking as ``reasoning`` or ``reasoning_content``, which the chat template receives as ``reasoning_content``.

Chat template controls (chat and /tokenize with ``messages``), as vLLM takes them: ``add_generation_prompt`` (default
true; false renders no assistant header), ``continue_final_message`` (the prompt ends with the last message, an
assistant's, unterminated: the model continues a prefilled answer; add_generation_prompt then defaults to false and
may not be true) and ``chat_template_kwargs`` (an object of extra template variables, such as Qwen3's
``enable_thinking``; names the server sets itself are refused) and ``documents`` (a list of objects, HF's ``{"title",
"text"}``, given to a retrieval-augmented template as ``documents``) and ``chat_template`` (a Jinja template rendering
this request instead of the model's; null or "": the model's; the server must run with --trust-request-chat-template).
Their checks are the gRPC API's ChatPrompt checks.

vLLM's response controls: ``stream_options.continuous_usage_stats`` (with ``stream``: every chunk carries ``usage``
with the prompt's tokens and its choice's completion tokens so far, the final usage chunk unchanged; alone it implies
``include_usage``, as vLLM's include_usage defaults to true, and with ``include_usage: false`` it is refused),
``return_tokens_as_token_ids`` (both endpoints: logprobs write every token ``"token_id:{id}"``, logprobs.py) and chat's
``echo`` (when the last message is the assistant's, the role of the response, its content goes before each choice's
content; streamed, in a chunk per choice right after the role chunk; with tool calls, as the message's content).

Predicted outputs (OpenAI's ``prediction``, both endpoints): ``{"type": "content", "content": ...}``, the content a
string or a list of text parts (joined), is the GenerateRequest's ``prediction``: its tokens are speculative drafts,
so the output is the same, only faster where it follows the prediction; usage then carries
``completion_tokens_details.accepted_prediction_tokens`` and ``rejected_prediction_tokens`` (responses.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""An integer the proto holds in 32 bits: a larger one is refused naming its parameter, not a crash."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Strict):
    """``stream_options``: with ``include_usage``, a last chunk carries the usage (and every other ``usage: null``);
    with vLLM's ``continuous_usage_stats`` too, every other chunk carries the counts so far instead."""

    include_usage: bool | None = None
    """Unset: false, unless continuous_usage_stats is true (vLLM's include_usage defaults to true)."""
    continuous_usage_stats: bool | None = None
    """vLLM's: every chunk's ``usage`` holds the prompt's tokens and its choice's completion tokens so far; needs
    include_usage (false with it is refused: vLLM would send nothing)."""


class TextPart(_Strict):
    """One part of a message's content given as a list; only text parts are served."""

    type: str
    text: str | None = None


class Prediction(_Strict):
    """``prediction`` (OpenAI's predicted outputs): text the output is expected to largely repeat."""

    type: Literal["content"]
    """The only kind OpenAI defines."""
    content: str | list[TextPart]
    """The predicted text, or text parts joined; empty: no prediction."""


class JsonSchemaFormat(_Strict):
    """``response_format.json_schema``: OpenAI's named schema."""

    name: str
    """Required, as OpenAI requires it (the openai package sends it); changes no output."""
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """The JSON Schema (``schema`` in the body: the name clashes with pydantic's own); required."""
    strict: bool | None = None
    """Accepted either way: the schema is always enforced."""


class StructuredOutputs(_Strict):
    """vLLM's ``structured_outputs`` (its newer form of the ``guided_*`` parameters): at most one key set."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    """A JSON Schema, as an object or its JSON text (``json`` in the body: the name clashes with pydantic's own)."""
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    """Lark or GBNF."""
    json_object: bool | None = None


class ResponseFormat(_Strict):
    """``response_format``: free text, any JSON object, or JSON valid under a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    """Only with type json_schema (which requires it)."""


class FunctionCall(_Strict):
    """The ``function`` of a tool call: its name and its arguments as JSON text."""

    name: str
    arguments: str


class ToolCall(_Strict):
    """One of an assistant message's ``tool_calls``, as a response gave it."""

    id: str
    type: str
    """Only "function" is served."""
    function: FunctionCall | None = None
    """Required with type "function"."""


class ChatMessage(_Strict):
    """One message of ``messages``."""

    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    """A tool message's: the call it answers."""
    tool_calls: list[ToolCall] | None = None
    """An assistant message's: the calls it made."""
    reasoning: str | None = None
    """An assistant message's thinking, as a response with --reasoning-parser gave it (vLLM's name), given to the
    chat template as ``reasoning_content``, which templates such as Qwen3's read."""
    reasoning_content: str | None = None
    """The same under DeepSeek's (and SGLang's, older vLLM's) name; with both, they must agree."""


class FunctionDefinition(_Strict):
    """``tools[i].function``: a function the model may call."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """The JSON Schema of its arguments; absent: an object with no properties."""
    strict: bool | None = None
    """Accepted either way: a call's arguments always follow ``parameters``."""


class Tool(_Strict):
    """One of ``tools``; only type "function" is served."""

    type: str
    function: FunctionDefinition | None = None
    """Required with type "function"."""


class SamplingFields(_Strict):
    """Parameters both endpoints share."""

    model: str | None = None
    max_tokens: Int32 | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    """Tags for OpenAI's stored completions: nothing is stored here, and they change no output."""
    store: bool | None = None
    logit_bias: dict[str, Any] | None = None
    # vLLM's extensions
    top_k: Int32 | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    priority: Int32 | None = None
    """Scheduling priority (lower first; the server needs --scheduling-policy priority for any value but 0)."""
    min_tokens: Int32 | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[Int32] | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    """vLLM's: every token string in ``logprobs`` is written ``"token_id:{id}"`` instead of its text."""
    prompt_logprobs: Int32 | None = None
    """vLLM's: the logprob of each prompt token after the first (given those before it) and this many top
    alternatives; refused with ``stream``."""
    allowed_token_ids: list[Int32] | None = None
    """vLLM's: only these token ids may be sampled (EOS too only if listed); null or empty: all."""
    bad_words: list[str] | None = None
    """vLLM's: words never generated (as written, or after a space); null or empty: none."""
    truncate_prompt_tokens: Int32 | None = None
    """vLLM's: keep only the prompt's last this many tokens (after the chat template); -1: the most the model's
    context allows (max_model_len - 1). Usage counts the tokens kept."""
    prediction: Prediction | None = None
    """OpenAI's predicted output: its tokens serve as speculative drafts (the output is unchanged); usage then counts
    the accepted and rejected ones in ``completion_tokens_details``."""
    # Structured output: OpenAI's response_format, vLLM's guided_* (at most one)
    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: StructuredOutputs | None = None


class ChatTemplateFields(_Strict):
    """vLLM's chat template controls, on the chat endpoint and /tokenize with ``messages``."""

    add_generation_prompt: bool | None = None
    """Whether the template appends the assistant's header; unset: true, or false with continue_final_message."""
    continue_final_message: bool | None = None
    """The prompt ends with the last message (an assistant's) unterminated, for the model to continue it."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Extra variables for the chat template (``{"enable_thinking": false}``)."""
    documents: list[dict[str, Any]] | None = None
    """Documents for retrieval-augmented generation, given to the template as ``documents`` (``{"title", "text"}``)."""
    chat_template: str | None = None
    """vLLM's: a Jinja chat template to render this request with instead of the model's (the server must trust
    request templates); null or empty: the model's."""


class ChatCompletionRequest(SamplingFields, ChatTemplateFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage]
    max_completion_tokens: Int32 | None = None
    logprobs: bool | None = None
    top_logprobs: Int32 | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    """"none", "auto", "required" or ``{"type": "function", "function": {"name": ...}}``: read by tools.py."""
    parallel_tool_calls: bool | None = None
    """False: with tool_choice "required" or "auto", at most one call."""
    echo: bool | None = None
    """vLLM's: when the last message is the assistant's (the role the response has), its content goes before each
    choice's content (streamed: in a chunk of its own after the role chunk)."""
    include_reasoning: bool | None = None
    """vLLM's: false leaves the thinking the server's --reasoning-parser splits off out of the response (unset:
    true; without a parser nothing is split off)."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """OpenAI's: how much a reasoning model thinks, given to the chat template as ``reasoning_effort`` (gpt-oss's
    template writes it into the system message), as vLLM does; templates that do not read it ignore it."""
    thinking_token_budget: Int32 | None = None
    """vLLM's: at most this many tokens of thinking, then the end of the thinking is forced and the model answers
    (needs the server's --reasoning-parser, its markers single tokens of the model; not gpt-oss's)."""
    functions: list[Any] | None = None


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[Int32] | list[list[Int32]]
    logprobs: Int32 | None = None
    echo: bool | None = None
    """The prompt before each choice's text (and with ``logprobs``, its tokens' logprobs before the output's: the
    first is null, having no context)."""
    suffix: str | None = None
    best_of: Int32 | None = None


class TokenizeRequest(ChatTemplateFields):
    """``POST /tokenize`` (vLLM's shape): ``prompt`` (text) or ``messages`` (chat template applied, with the
    chat template controls of ChatTemplateFields)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[Tool] | None = None
    """With ``messages``: the tools the chat template is given (as a chat completion whose tool_choice is not
    "none" gives them)."""
    add_special_tokens: bool | None = None
    """Only true (what the completions endpoint does with a text prompt) is served."""


class DetokenizeRequest(_Strict):
    """``POST /detokenize`` (vLLM's shape)."""

    model: str | None = None
    tokens: list[Int32]
    skip_special_tokens: bool | None = None


class LoadLoraAdapterRequest(_Strict):
    """``POST /v1/load_lora_adapter`` (vLLM's shape)."""

    lora_name: str
    """The name requests give as their ``model`` to run with the adapter."""
    lora_path: str
    """The adapter's directory (peft's ``adapter_config.json`` and weights), as the executors see it."""


class UnloadLoraAdapterRequest(_Strict):
    """``POST /v1/unload_lora_adapter`` (vLLM's shape)."""

    lora_name: str
    lora_int_id: int | None = None
    """vLLM's; accepted and ignored (adapters are known by name)."""


Endpoint = Literal["chat", "completion"]
