"""`--default-chat-template-kwargs` (vLLM's flag): a JSON object of chat template variables from `scheduler` and its
environment variable, forwarded by `serve`; every chat prompt is rendered with them unless the request sets its own
(the gRPC ChatPrompt.template_kwargs_json, HTTP chat_template_kwargs); a value that is not a JSON object, or names a
variable the server sets itself, is refused naming the flag."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of
from tiny_tokenizers import build_thinking

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request
from stepahead_proto import generation_pb2

OFF = '{"enable_thinking": false}'


def test_the_flag_and_its_variable_set_the_defaults_and_serve_forwards_them(monkeypatch):
    assert scheduler_config_of(SCHEDULER).chat_template_defaults() == {}
    config = scheduler_config_of([*SCHEDULER, "--default-chat-template-kwargs", OFF])
    assert config.chat_template_defaults() == {"enable_thinking": False}
    monkeypatch.setenv("STEPAHEAD_DEFAULT_CHAT_TEMPLATE_KWARGS", '{"persona": "pirate"}')
    assert scheduler_config_of(SCHEDULER).chat_template_defaults() == {"persona": "pirate"}
    monkeypatch.delenv("STEPAHEAD_DEFAULT_CHAT_TEMPLATE_KWARGS")
    parser = _build_parser()
    assert "--default-chat-template-kwargs" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--default-chat-template-kwargs", OFF]))
    assert flags[flags.index("--default-chat-template-kwargs") + 1] == OFF


@pytest.mark.parametrize(("value", "why"), [
    ("{", "not JSON"), ("[1]", "must be a JSON object"), ('{"messages": []}', "'messages' is a variable the server"),
])
def test_bad_defaults_are_refused_naming_the_flag(value, why):
    with pytest.raises(ValueError, match=f"^default_chat_template_kwargs: .*{why}"):
        scheduler_config_of([*SCHEDULER, "--default-chat-template-kwargs", value])


def test_chat_prompts_get_the_defaults_unless_they_set_the_variable(tmp_path):
    tokenizer = Tokenizer.from_dir(build_thinking(tmp_path))
    defaults = scheduler_config_of([*SCHEDULER, "--default-chat-template-kwargs", OFF]).chat_template_defaults()
    limits = ModelLimits("m", 512, tokenizer.vocab_size, frozenset({0}), 16)
    with_defaults = ModelLimits("m", 512, tokenizer.vocab_size, frozenset({0}), 16, chat_template_defaults=defaults)

    def prompt(limits: ModelLimits, kwargs: str = "") -> str:
        chat = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="Hi")],
                                         template_kwargs_json=kwargs)
        return tokenizer.decode(build_request(generation_pb2.GenerateRequest(chat=chat), tokenizer, limits)
                                .prompt_token_ids)

    assert prompt(with_defaults) == prompt(limits, OFF) != prompt(limits)
    assert prompt(with_defaults).endswith("<think>\n\n</think>\n\n")
    assert prompt(with_defaults, '{"enable_thinking": true}') == prompt(limits)
