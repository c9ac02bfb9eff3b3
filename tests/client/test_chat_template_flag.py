"""`--chat-template` (vLLM's flag: a Jinja file or the template itself instead of the model's chat template)
reaches the scheduler's config from `scheduler` and its environment variable, `serve` forwards it, and a missing
file or a template that does not compile is refused naming it."""

from __future__ import annotations

import pytest
from cli_configs import SCHEDULER, scheduler_config_of

from client.cli import _build_parser
from scheduler_svc.cli_args import scheduler_flags
from scheduler_svc.config import SchedulerServiceConfig

TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"



def test_a_file_or_the_template_itself_is_the_source_and_none_is_the_models(tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    assert scheduler_config_of(SCHEDULER).chat_template_source() is None
    assert scheduler_config_of([*SCHEDULER, "--chat-template", str(path)]).chat_template_source() == TEMPLATE
    assert scheduler_config_of([*SCHEDULER, "--chat-template", TEMPLATE]).chat_template_source() == TEMPLATE


def test_the_environment_sets_it_and_serve_forwards_it(monkeypatch, tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    monkeypatch.setenv("STEPAHEAD_CHAT_TEMPLATE", str(path))
    assert scheduler_config_of(SCHEDULER).chat_template_source() == TEMPLATE
    monkeypatch.delenv("STEPAHEAD_CHAT_TEMPLATE")
    parser = _build_parser()
    assert "--chat-template" not in scheduler_flags(parser.parse_args(["serve"]))
    flags = scheduler_flags(parser.parse_args(["serve", "--chat-template", str(path)]))
    assert flags[flags.index("--chat-template") + 1] == str(path)


@pytest.mark.parametrize(("value", "message"), [
    ("no/such/template.jinja", "^chat_template: no such file: 'no/such/template.jinja' "),
    ("{% for m in messages %}", r"^chat_template: '\{% for m in messages %\}' does not compile: "),
])
def test_a_missing_file_or_a_broken_template_is_refused_naming_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), chat_template=value)


def test_a_broken_template_file_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "broken.jinja"
    path.write_text("{{ x")
    with pytest.raises(ValueError, match=f"^chat_template: '{path}' does not compile: "):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), chat_template=str(path))
