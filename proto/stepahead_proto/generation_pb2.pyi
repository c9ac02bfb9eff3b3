from stepahead_proto import sampling_pb2 as _sampling_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "tool_calls_json", "tool_call_id", "name", "reasoning_content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    tool_calls_json: str
    tool_call_id: str
    name: str
    reasoning_content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., tool_calls_json: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., reasoning_content: _Optional[str] = ...) -> None: ...

class ChatPrompt(_message.Message):
    __slots__ = ("messages", "tools_json", "add_generation_prompt", "continue_final_message", "template_kwargs_json", "documents_json", "chat_template")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools_json: str
    add_generation_prompt: bool
    continue_final_message: bool
    template_kwargs_json: str
    documents_json: str
    chat_template: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools_json: _Optional[str] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., template_kwargs_json: _Optional[str] = ..., documents_json: _Optional[str] = ..., chat_template: _Optional[str] = ...) -> None: ...

class TokenIdsPrompt(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "model", "text", "chat", "token_ids", "sampling", "stopping", "skip_special_tokens", "disable_speculation", "priority", "truncate_prompt_tokens", "split_reasoning", "parse_tool_calls", "parallel_tool_calls", "prediction")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_SPECULATION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_REASONING_FIELD_NUMBER: _ClassVar[int]
    PARSE_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    text: str
    chat: ChatPrompt
    token_ids: TokenIdsPrompt
    sampling: _sampling_pb2.SamplingParams
    stopping: _sampling_pb2.StoppingParams
    skip_special_tokens: bool
    disable_speculation: bool
    priority: int
    truncate_prompt_tokens: int
    split_reasoning: bool
    parse_tool_calls: bool
    parallel_tool_calls: bool
    prediction: str
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatPrompt, _Mapping]] = ..., token_ids: _Optional[_Union[TokenIdsPrompt, _Mapping]] = ..., sampling: _Optional[_Union[_sampling_pb2.SamplingParams, _Mapping]] = ..., stopping: _Optional[_Union[_sampling_pb2.StoppingParams, _Mapping]] = ..., skip_special_tokens: _Optional[bool] = ..., disable_speculation: _Optional[bool] = ..., priority: _Optional[int] = ..., truncate_prompt_tokens: _Optional[int] = ..., split_reasoning: _Optional[bool] = ..., parse_tool_calls: _Optional[bool] = ..., parallel_tool_calls: _Optional[bool] = ..., prediction: _Optional[str] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class PositionLogprobs(_message.Message):
    __slots__ = ("sampled", "top")
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    sampled: TokenLogprob
    top: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, sampled: _Optional[_Union[TokenLogprob, _Mapping]] = ..., top: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "num_preemptions", "cached_prompt_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    num_preemptions: int
    cached_prompt_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., num_preemptions: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., accepted_prediction_tokens: _Optional[int] = ..., rejected_prediction_tokens: _Optional[int] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("queue_s", "ttft_s", "itl_mean_s", "itl_p50_s", "itl_max_s", "e2e_s")
    QUEUE_S_FIELD_NUMBER: _ClassVar[int]
    TTFT_S_FIELD_NUMBER: _ClassVar[int]
    ITL_MEAN_S_FIELD_NUMBER: _ClassVar[int]
    ITL_P50_S_FIELD_NUMBER: _ClassVar[int]
    ITL_MAX_S_FIELD_NUMBER: _ClassVar[int]
    E2E_S_FIELD_NUMBER: _ClassVar[int]
    queue_s: float
    ttft_s: float
    itl_mean_s: float
    itl_p50_s: float
    itl_max_s: float
    e2e_s: float
    def __init__(self, queue_s: _Optional[float] = ..., ttft_s: _Optional[float] = ..., itl_mean_s: _Optional[float] = ..., itl_p50_s: _Optional[float] = ..., itl_max_s: _Optional[float] = ..., e2e_s: _Optional[float] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "text", "token_ids", "logprobs", "finish_reason", "stop_reason", "usage", "timings", "prompt_tokens", "spec", "prompt_logprobs", "reasoning_text", "thought", "tool_calls")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TEXT_FIELD_NUMBER: _ClassVar[int]
    THOUGHT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[PositionLogprobs]
    finish_reason: FinishReason
    stop_reason: str
    usage: Usage
    timings: Timings
    prompt_tokens: int
    spec: SpecStats
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[PositionLogprobs]
    reasoning_text: str
    thought: bool
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[_Union[PositionLogprobs, _Mapping]]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., stop_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., spec: _Optional[_Union[SpecStats, _Mapping]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[PositionLogprobs, _Mapping]]] = ..., reasoning_text: _Optional[str] = ..., thought: _Optional[bool] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class SpecStats(_message.Message):
    __slots__ = ("drafted", "accepted", "accepted_per_position", "mean_acceptance_length", "verify_steps", "steps_per_k", "mean_k", "tried_per_position")
    DRAFTED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    MEAN_ACCEPTANCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    VERIFY_STEPS_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_K_FIELD_NUMBER: _ClassVar[int]
    MEAN_K_FIELD_NUMBER: _ClassVar[int]
    TRIED_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    drafted: int
    accepted: int
    accepted_per_position: _containers.RepeatedScalarFieldContainer[int]
    mean_acceptance_length: float
    verify_steps: int
    steps_per_k: _containers.RepeatedScalarFieldContainer[int]
    mean_k: float
    tried_per_position: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, drafted: _Optional[int] = ..., accepted: _Optional[int] = ..., accepted_per_position: _Optional[_Iterable[int]] = ..., mean_acceptance_length: _Optional[float] = ..., verify_steps: _Optional[int] = ..., steps_per_k: _Optional[_Iterable[int]] = ..., mean_k: _Optional[float] = ..., tried_per_position: _Optional[_Iterable[int]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("aborted",)
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    aborted: bool
    def __init__(self, aborted: _Optional[bool] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("model", "text", "chat")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    chat: ChatPrompt
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatPrompt, _Mapping]] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("token_ids", "max_model_len")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    max_model_len: int
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., max_model_len: _Optional[int] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("model", "token_ids", "skip_special_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    skip_special_tokens: bool
    def __init__(self, model: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., skip_special_tokens: _Optional[bool] = ...) -> None: ...

class DetokenizeResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model", "max_model_len", "vocab_size", "eos_token_ids", "block_size", "num_kv_blocks", "num_free_kv_blocks", "num_running", "num_waiting", "stats", "server_version", "lora_adapters", "max_loras", "reasoning_parser", "format_after_thinking", "tool_call_parser")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_LORAS_FIELD_NUMBER: _ClassVar[int]
    REASONING_PARSER_FIELD_NUMBER: _ClassVar[int]
    FORMAT_AFTER_THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_PARSER_FIELD_NUMBER: _ClassVar[int]
    model: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    block_size: int
    num_kv_blocks: int
    num_free_kv_blocks: int
    num_running: int
    num_waiting: int
    stats: EngineStats
    server_version: str
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    max_loras: int
    reasoning_parser: str
    format_after_thinking: bool
    tool_call_parser: str
    def __init__(self, model: _Optional[str] = ..., max_model_len: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., block_size: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ..., num_free_kv_blocks: _Optional[int] = ..., num_running: _Optional[int] = ..., num_waiting: _Optional[int] = ..., stats: _Optional[_Union[EngineStats, _Mapping]] = ..., server_version: _Optional[str] = ..., lora_adapters: _Optional[_Iterable[str]] = ..., max_loras: _Optional[int] = ..., reasoning_parser: _Optional[str] = ..., format_after_thinking: _Optional[bool] = ..., tool_call_parser: _Optional[str] = ...) -> None: ...

class LoadLoraAdapterRequest(_message.Message):
    __slots__ = ("lora_name", "lora_path")
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    LORA_PATH_FIELD_NUMBER: _ClassVar[int]
    lora_name: str
    lora_path: str
    def __init__(self, lora_name: _Optional[str] = ..., lora_path: _Optional[str] = ...) -> None: ...

class UnloadLoraAdapterRequest(_message.Message):
    __slots__ = ("lora_name",)
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    lora_name: str
    def __init__(self, lora_name: _Optional[str] = ...) -> None: ...

class LoraAdaptersResponse(_message.Message):
    __slots__ = ("lora_adapters",)
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lora_adapters: _Optional[_Iterable[str]] = ...) -> None: ...

class EngineStats(_message.Message):
    __slots__ = ("steps", "executor_busy_s", "executor_bubble_s", "num_preemptions", "spec_drafted", "spec_accepted", "executor_draft_s", "executor_forward_s", "scheduler_invocations", "step_requests", "scheduler_cpu_s", "prefix_cache_queried_tokens", "prefix_cache_hit_tokens", "executor_bubble_awaiting_step_s", "result_delivery_s", "step_delivery_s")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_BUSY_S_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_BUBBLE_S_FIELD_NUMBER: _ClassVar[int]
    NUM_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    SPEC_DRAFTED_FIELD_NUMBER: _ClassVar[int]
    SPEC_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_DRAFT_S_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_INVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    STEP_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_CPU_S_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_QUERIED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_BUBBLE_AWAITING_STEP_S_FIELD_NUMBER: _ClassVar[int]
    RESULT_DELIVERY_S_FIELD_NUMBER: _ClassVar[int]
    STEP_DELIVERY_S_FIELD_NUMBER: _ClassVar[int]
    steps: int
    executor_busy_s: float
    executor_bubble_s: float
    num_preemptions: int
    spec_drafted: int
    spec_accepted: int
    executor_draft_s: float
    executor_forward_s: float
    scheduler_invocations: int
    step_requests: int
    scheduler_cpu_s: float
    prefix_cache_queried_tokens: int
    prefix_cache_hit_tokens: int
    executor_bubble_awaiting_step_s: float
    result_delivery_s: float
    step_delivery_s: float
    def __init__(self, steps: _Optional[int] = ..., executor_busy_s: _Optional[float] = ..., executor_bubble_s: _Optional[float] = ..., num_preemptions: _Optional[int] = ..., spec_drafted: _Optional[int] = ..., spec_accepted: _Optional[int] = ..., executor_draft_s: _Optional[float] = ..., executor_forward_s: _Optional[float] = ..., scheduler_invocations: _Optional[int] = ..., step_requests: _Optional[int] = ..., scheduler_cpu_s: _Optional[float] = ..., prefix_cache_queried_tokens: _Optional[int] = ..., prefix_cache_hit_tokens: _Optional[int] = ..., executor_bubble_awaiting_step_s: _Optional[float] = ..., result_delivery_s: _Optional[float] = ..., step_delivery_s: _Optional[float] = ...) -> None: ...
