from stepahead_proto import sampling_pb2 as _sampling_pb2
from stepahead_proto import generation_pb2 as _generation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExecutorDescription(_message.Message):
    __slots__ = ("model", "max_model_len", "vocab_size", "eos_token_ids", "block_size", "num_kv_blocks", "device", "dtype", "attention_backend", "num_threads", "spec_method", "max_num_spec_tokens", "model_fingerprint", "structured_output", "lora_adapters", "max_loras", "max_lora_rank", "max_num_prediction_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_BACKEND_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    SPEC_METHOD_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SPEC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_LORAS_FIELD_NUMBER: _ClassVar[int]
    MAX_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    block_size: int
    num_kv_blocks: int
    device: str
    dtype: str
    attention_backend: str
    num_threads: int
    spec_method: str
    max_num_spec_tokens: int
    model_fingerprint: str
    structured_output: bool
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    max_loras: int
    max_lora_rank: int
    max_num_prediction_tokens: int
    def __init__(self, model: _Optional[str] = ..., max_model_len: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., block_size: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ..., device: _Optional[str] = ..., dtype: _Optional[str] = ..., attention_backend: _Optional[str] = ..., num_threads: _Optional[int] = ..., spec_method: _Optional[str] = ..., max_num_spec_tokens: _Optional[int] = ..., model_fingerprint: _Optional[str] = ..., structured_output: _Optional[bool] = ..., lora_adapters: _Optional[_Iterable[str]] = ..., max_loras: _Optional[int] = ..., max_lora_rank: _Optional[int] = ..., max_num_prediction_tokens: _Optional[int] = ...) -> None: ...

class LoraAdapterRequest(_message.Message):
    __slots__ = ("name", "path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class LoraAdapterReply(_message.Message):
    __slots__ = ("lora_adapters",)
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lora_adapters: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ProfileRequest(_message.Message):
    __slots__ = ("batch_sizes", "context_len", "repeats", "calibration_prompts", "calibration_max_tokens")
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LEN_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    context_len: int
    repeats: int
    calibration_prompts: _containers.RepeatedCompositeFieldContainer[TokenIds]
    calibration_max_tokens: int
    def __init__(self, batch_sizes: _Optional[_Iterable[int]] = ..., context_len: _Optional[int] = ..., repeats: _Optional[int] = ..., calibration_prompts: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., calibration_max_tokens: _Optional[int] = ...) -> None: ...

class StepTimeRow(_message.Message):
    __slots__ = ("step_ms",)
    STEP_MS_FIELD_NUMBER: _ClassVar[int]
    step_ms: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, step_ms: _Optional[_Iterable[float]] = ...) -> None: ...

class StepProfile(_message.Message):
    __slots__ = ("batch_sizes", "rows", "acceptance_prior", "profile_s")
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_PRIOR_FIELD_NUMBER: _ClassVar[int]
    PROFILE_S_FIELD_NUMBER: _ClassVar[int]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    rows: _containers.RepeatedCompositeFieldContainer[StepTimeRow]
    acceptance_prior: _containers.RepeatedScalarFieldContainer[float]
    profile_s: float
    def __init__(self, batch_sizes: _Optional[_Iterable[int]] = ..., rows: _Optional[_Iterable[_Union[StepTimeRow, _Mapping]]] = ..., acceptance_prior: _Optional[_Iterable[float]] = ..., profile_s: _Optional[float] = ...) -> None: ...

class NewRequestData(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "output_token_ids", "sampling", "block_ids", "num_computed_tokens", "num_scheduled_tokens", "num_spec_tokens", "stop", "bad_words", "lora_adapter", "format_after_thinking", "prediction_token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_COMPUTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SCHEDULED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SPEC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_FIELD_NUMBER: _ClassVar[int]
    FORMAT_AFTER_THINKING_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    output_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: _sampling_pb2.SamplingParams
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    num_computed_tokens: int
    num_scheduled_tokens: int
    num_spec_tokens: int
    stop: StopConditions
    bad_words: _containers.RepeatedCompositeFieldContainer[TokenSequence]
    lora_adapter: str
    format_after_thinking: FormatAfterThinking
    prediction_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., output_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[_sampling_pb2.SamplingParams, _Mapping]] = ..., block_ids: _Optional[_Iterable[int]] = ..., num_computed_tokens: _Optional[int] = ..., num_scheduled_tokens: _Optional[int] = ..., num_spec_tokens: _Optional[int] = ..., stop: _Optional[_Union[StopConditions, _Mapping]] = ..., bad_words: _Optional[_Iterable[_Union[TokenSequence, _Mapping]]] = ..., lora_adapter: _Optional[str] = ..., format_after_thinking: _Optional[_Union[FormatAfterThinking, _Mapping]] = ..., prediction_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class FormatAfterThinking(_message.Message):
    __slots__ = ("end_token_ids", "opener_token_ids", "header_end_token_id")
    END_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OPENER_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    HEADER_END_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    end_token_ids: _containers.RepeatedScalarFieldContainer[int]
    opener_token_ids: _containers.RepeatedScalarFieldContainer[int]
    header_end_token_id: int
    def __init__(self, end_token_ids: _Optional[_Iterable[int]] = ..., opener_token_ids: _Optional[_Iterable[int]] = ..., header_end_token_id: _Optional[int] = ...) -> None: ...

class TokenSequence(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class StopConditions(_message.Message):
    __slots__ = ("max_tokens", "min_tokens", "stop_token_ids", "max_model_len")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    min_tokens: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    max_model_len: int
    def __init__(self, max_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., max_model_len: _Optional[int] = ...) -> None: ...

class CachedRequestData(_message.Message):
    __slots__ = ("request_id", "new_block_ids", "num_computed_tokens", "num_scheduled_tokens", "num_draft_tokens", "num_spec_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_COMPUTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SCHEDULED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SPEC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    new_block_ids: _containers.RepeatedScalarFieldContainer[int]
    num_computed_tokens: int
    num_scheduled_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., new_block_ids: _Optional[_Iterable[int]] = ..., num_computed_tokens: _Optional[int] = ..., num_scheduled_tokens: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., num_spec_tokens: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("step_id", "new_requests", "cached_requests", "finished_request_ids", "num_steps", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CACHED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    step_id: int
    new_requests: _containers.RepeatedCompositeFieldContainer[NewRequestData]
    cached_requests: _containers.RepeatedCompositeFieldContainer[CachedRequestData]
    finished_request_ids: _containers.RepeatedScalarFieldContainer[str]
    num_steps: int
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, step_id: _Optional[int] = ..., new_requests: _Optional[_Iterable[_Union[NewRequestData, _Mapping]]] = ..., cached_requests: _Optional[_Iterable[_Union[CachedRequestData, _Mapping]]] = ..., finished_request_ids: _Optional[_Iterable[str]] = ..., num_steps: _Optional[int] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RequestStepOutput(_message.Message):
    __slots__ = ("request_id", "token_ids", "logprobs", "num_drafted", "num_accepted", "num_draft_slots", "finished", "prompt_logprobs", "prompt_logprobs_start", "drafts_from_prediction")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFTED_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_SLOTS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_START_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FROM_PREDICTION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[_generation_pb2.PositionLogprobs]
    num_drafted: int
    num_accepted: int
    num_draft_slots: int
    finished: bool
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_generation_pb2.PositionLogprobs]
    prompt_logprobs_start: int
    drafts_from_prediction: bool
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[_Union[_generation_pb2.PositionLogprobs, _Mapping]]] = ..., num_drafted: _Optional[int] = ..., num_accepted: _Optional[int] = ..., num_draft_slots: _Optional[int] = ..., finished: _Optional[bool] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_generation_pb2.PositionLogprobs, _Mapping]]] = ..., prompt_logprobs_start: _Optional[int] = ..., drafts_from_prediction: _Optional[bool] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("step_id", "outputs", "compute_start_s", "compute_end_s", "forward_s", "sample_s", "draft_s", "num_device_input_ids", "sub_step", "received_s")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_START_S_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_END_S_FIELD_NUMBER: _ClassVar[int]
    FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_S_FIELD_NUMBER: _ClassVar[int]
    DRAFT_S_FIELD_NUMBER: _ClassVar[int]
    NUM_DEVICE_INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    SUB_STEP_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_S_FIELD_NUMBER: _ClassVar[int]
    step_id: int
    outputs: _containers.RepeatedCompositeFieldContainer[RequestStepOutput]
    compute_start_s: float
    compute_end_s: float
    forward_s: float
    sample_s: float
    draft_s: float
    num_device_input_ids: int
    sub_step: int
    received_s: float
    def __init__(self, step_id: _Optional[int] = ..., outputs: _Optional[_Iterable[_Union[RequestStepOutput, _Mapping]]] = ..., compute_start_s: _Optional[float] = ..., compute_end_s: _Optional[float] = ..., forward_s: _Optional[float] = ..., sample_s: _Optional[float] = ..., draft_s: _Optional[float] = ..., num_device_input_ids: _Optional[int] = ..., sub_step: _Optional[int] = ..., received_s: _Optional[float] = ...) -> None: ...
