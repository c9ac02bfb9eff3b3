"""The parameter names of an API translated onto the chat endpoint (the Responses and Messages APIs): errors the chat
checks raise name the chat request's parameters, and are renamed to the caller's (ParamNames, validated_chat)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_svc.http.errors import ApiError, from_validation_error
from scheduler_svc.http.protocol import ChatCompletionRequest

_MESSAGE_PARAM = re.compile(r"^messages\[(\d+)\]")


@dataclass(frozen=True)
class ParamNames:
    """How one request's chat parameters are named in its own API."""

    message_params: tuple[str, ...] = ()
    """The caller's parameter each chat message came from (``instructions``, ``input[i]``, ``messages[i]``, ...)."""
    renames: tuple[tuple[str, str], ...] = ()
    """(pattern, replacement) for the start of a chat parameter, the first that matches used."""

    def renamed(self, error: ApiError) -> ApiError:
        """``error`` of the chat request, naming the caller's parameter instead of the chat one."""
        if error.param is None:
            return error
        param = self.name_of(error.param)
        if param == error.param:
            return error
        message = param + error.message[len(error.param):] if error.message.startswith(error.param) else error.message
        return ApiError(error.code, message, param, error.error_code)

    def name_of(self, param: str) -> str:
        """The caller's name of the chat parameter ``param``."""
        for pattern, replacement in self.renames:
            renamed, count = re.subn(pattern, replacement, param, count=1)
            if count:
                return renamed
        found = _MESSAGE_PARAM.match(param)
        if found and int(found.group(1)) < len(self.message_params):
            return self.message_params[int(found.group(1))]
        return param


def validated_chat(fields: dict[str, Any], names: ParamNames) -> ChatCompletionRequest:
    """The chat request of these fields (None: unset), checked; ApiError (400) naming the caller's parameter."""
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as error:
        raise names.renamed(from_validation_error(error)) from None
