"""`--trust-request-chat-template` reaches the scheduler's config from `scheduler` and its environment variable, and
`serve` forwards it; off by default."""

from __future__ import annotations

from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags


def test_off_by_default_and_on_when_given(monkeypatch):
    assert not scheduler_config_of(SCHEDULER).trust_request_chat_template
    assert scheduler_config_of([*SCHEDULER, "--trust-request-chat-template"]).trust_request_chat_template
    monkeypatch.setenv("STEPAHEAD_TRUST_REQUEST_CHAT_TEMPLATE", "true")
    assert scheduler_config_of(SCHEDULER).trust_request_chat_template


def test_serve_forwards_it_to_the_scheduler():
    parser = _build_parser()
    assert "--trust-request-chat-template" not in scheduler_flags(parser.parse_args(["serve"]))
    assert "--trust-request-chat-template" in scheduler_flags(
        parser.parse_args(["serve", "--trust-request-chat-template"]))
