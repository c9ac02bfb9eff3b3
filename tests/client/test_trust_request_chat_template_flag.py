"""`--trust-request-chat-template` reaches the scheduler's config from `scheduler` and its environment variable, and
`serve` forwards it; off by default."""

from __future__ import annotations

from client.cli import _build_parser
from client.env_defaults import resolve_env_defaults
from scheduler_svc.cli_args import scheduler_config_from_args, scheduler_flags
from scheduler_svc.config import SchedulerServiceConfig

SCHEDULER = ["scheduler", "--executor", "127.0.0.1:1"]


def config_of(argv: list[str]) -> SchedulerServiceConfig:
    args = resolve_env_defaults(_build_parser().parse_args(argv))
    return scheduler_config_from_args(args, "m", args.executor, 0, "127.0.0.1")


def test_off_by_default_and_on_when_given(monkeypatch):
    assert not config_of(SCHEDULER).trust_request_chat_template
    assert config_of([*SCHEDULER, "--trust-request-chat-template"]).trust_request_chat_template
    monkeypatch.setenv("STEPAHEAD_TRUST_REQUEST_CHAT_TEMPLATE", "true")
    assert config_of(SCHEDULER).trust_request_chat_template


def test_serve_forwards_it_to_the_scheduler():
    parser = _build_parser()
    assert "--trust-request-chat-template" not in scheduler_flags(parser.parse_args(["serve"]))
    assert "--trust-request-chat-template" in scheduler_flags(
        parser.parse_args(["serve", "--trust-request-chat-template"]))
