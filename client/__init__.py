"""Python SDK of stepahead: blocking and asyncio clients of the Generation service."""

from client.async_client import AsyncClient, AsyncGenerationStream
from client.errors import (
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    StepaheadError,
    UnauthenticatedError,
    UnavailableError,
)
from client.requests import GenerateOptions
from client.sync_client import Client, GenerationStream
from client.types import (
    GenerationChunk,
    GenerationResult,
    ModelInfo,
    PositionLogprobs,
    Timings,
    TokenizeResult,
    TokenLogprob,
    ToolCall,
    Usage,
)

__all__ = [
    "AlreadyExistsError",
    "AsyncClient",
    "AsyncGenerationStream",
    "CancelledError",
    "Client",
    "DeadlineExceededError",
    "GenerateOptions",
    "GenerationChunk",
    "GenerationResult",
    "GenerationStream",
    "InternalError",
    "InvalidArgumentError",
    "ModelInfo",
    "NotFoundError",
    "PositionLogprobs",
    "ResourceExhaustedError",
    "StepaheadError",
    "Timings",
    "TokenLogprob",
    "TokenizeResult",
    "ToolCall",
    "UnauthenticatedError",
    "UnavailableError",
    "Usage",
]
