"""`stepahead generate` sends every request parameter it has a flag for, and nothing it was not given."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fake_servers import serving, serving_later, unused_address

from client import cli
from stepahead_proto import generation_pb2, generation_pb2_grpc


class RecordingGeneration(generation_pb2_grpc.GenerationServicer):
    """Answers every Generate with "ok" and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        first = generation_pb2.GenerateResponse(request_id="r-1", text="ok", token_ids=[5], prompt_tokens=3)
        if request.sampling.HasField("prompt_logprobs"):  # prompt tokens 1 and 2 of 3
            for token_id in (7, 8):
                position = first.prompt_logprobs.add()
                position.sampled.token_id, position.sampled.logprob = token_id, -1.5
                for rank in range(request.sampling.prompt_logprobs):
                    position.top.add(token_id=rank, logprob=-0.5 - rank)
        yield first
        yield generation_pb2.GenerateResponse(request_id="r-1", finish_reason=generation_pb2.FINISH_REASON_LENGTH,
                                              usage=generation_pb2.Usage(prompt_tokens=3, completion_tokens=1))


@pytest.fixture()
def served() -> Iterator[tuple[str, RecordingGeneration]]:
    servicer = RecordingGeneration()
    with serving(servicer) as address:
        yield address, servicer


EVERY_FLAG = ["--system", "Be brief.", "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05",
              "--repetition-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.25",
              "--seed", "11", "--logprobs", "2", "--prompt-logprobs", "1",
              "--logit-bias", "7=-100", "--logit-bias", "9=2.5",
              "--max-tokens", "16", "--min-tokens", "2", "--stop", "\n\n", "--stop", "END", "--stop-token-id", "3",
              "--ignore-eos", "--include-stop-str", "--keep-special-tokens", "--no-speculation", "--priority", "-3",
              "--allowed-token-ids", "5", "6", "--allowed-token-ids", "7", "--bad-words", "darn", "heck it",
              "--truncate-prompt-tokens", "-1", "--no-split-reasoning", "--thinking-token-budget", "64"]


def test_every_flag_reaches_its_request_field(served, capsys):
    address, servicer = served
    cli.main(["generate", "Hi there", "--server", address, "--json", *EVERY_FLAG])
    assert json.loads(capsys.readouterr().out)["text"] == "ok"
    (request,) = servicer.requests
    assert [(m.role, m.content) for m in request.chat.messages] == [("system", "Be brief."), ("user", "Hi there")]
    sampling, stopping = request.sampling, request.stopping
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p) == pytest.approx((0.7, 0.9, 40, 0.05))
    assert (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) == pytest.approx(
        (1.1, 0.5, 0.25))
    assert (sampling.seed, sampling.logprobs, dict(sampling.logit_bias)) == (11, 2, {7: -100.0, 9: 2.5})
    assert sampling.HasField("prompt_logprobs") and sampling.prompt_logprobs == 1
    assert (stopping.max_tokens, stopping.min_tokens, list(stopping.stop), list(stopping.stop_token_ids)) == (
        16, 2, ["\n\n", "END"], [3])
    assert stopping.ignore_eos and stopping.include_stop_str_in_output
    assert request.HasField("skip_special_tokens") and not request.skip_special_tokens
    assert request.disable_speculation and request.priority == -3
    assert list(sampling.allowed_token_ids) == [5, 6, 7] and list(sampling.bad_words) == ["darn", "heck it"]
    assert request.HasField("truncate_prompt_tokens") and request.truncate_prompt_tokens == -1
    assert request.HasField("split_reasoning") and not request.split_reasoning
    assert sampling.HasField("thinking_token_budget") and sampling.thinking_token_budget == 64


def test_unset_flags_leave_the_server_defaults(served, capsys):
    address, servicer = served
    cli.main(["generate", "plain text", "--server", address, "--raw"])
    assert capsys.readouterr().out == "ok\n"
    (request,) = servicer.requests
    assert request.text == "plain text"
    assert request.sampling == generation_pb2.GenerateRequest().sampling
    assert request.stopping == generation_pb2.GenerateRequest().stopping
    assert not request.HasField("skip_special_tokens") and not request.disable_speculation and request.priority == 0
    assert not request.HasField("truncate_prompt_tokens") and not request.HasField("split_reasoning")
    assert not request.HasField("prediction")


class ThinkingGeneration(RecordingGeneration):
    """Thinks before answering, as a server with --reasoning-parser splits it (GenerateResponse.reasoning_text)."""

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        yield generation_pb2.GenerateResponse(request_id="r", reasoning_text="hm", token_ids=[4], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r", text="ok", token_ids=[5], thought=True,
                                              finish_reason=generation_pb2.FINISH_REASON_STOP)


def test_thinking_streams_to_stderr_and_split_reasoning_asks_for_it_on_a_raw_prompt(capsys):
    servicer = ThinkingGeneration()
    with serving(servicer) as address:
        cli.main(["generate", "plain text", "--server", address, "--raw", "--split-reasoning"])
        printed = capsys.readouterr()
        assert (printed.out, printed.err) == ("ok\n", "hm")
        cli.main(["generate", "Hi", "--server", address, "--json"])
        assert json.loads(capsys.readouterr().out)["reasoning"] == "hm"
    assert servicer.requests[0].HasField("split_reasoning") and servicer.requests[0].split_reasoning


def test_prompt_logprobs_are_in_the_json_output(served, capsys):
    address, servicer = served
    cli.main(["generate", "Hi", "--server", address, "--raw", "--json", "--prompt-logprobs", "2"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["prompt_logprobs"] == [
        {"sampled": {"token_id": token_id, "logprob": -1.5},
         "top": [{"token_id": 0, "logprob": -0.5}, {"token_id": 1, "logprob": -1.5}]}
        for token_id in (7, 8)]
    assert printed["logprobs"] == []
    cli.main(["generate", "Hi", "--server", address, "--raw", "--json"])
    assert json.loads(capsys.readouterr().out)["prompt_logprobs"] == []
    assert not servicer.requests[1].sampling.HasField("prompt_logprobs")


@pytest.mark.parametrize("flags, error", [
    (["--raw", "--system", "x"], "error: system: a system message needs the chat template (drop --raw)"),
    (["--logit-bias", "7"], "error: argument --logit-bias: must be ID=BIAS"),
    (["--logit-bias", "a=1"], "error: argument --logit-bias: must be ID=BIAS"),
    (["--allowed-token-ids", "5", "x"], "error: argument --allowed-token-ids: invalid int value: 'x'"),
    (["--allowed-token-ids"], "error: argument --allowed-token-ids: expected at least one argument"),
    (["--bad-words"], "error: argument --bad-words: expected at least one argument"),
    (["--truncate-prompt-tokens", "1.5"], "error: argument --truncate-prompt-tokens: invalid int value: '1.5'"),
])
def test_a_flag_that_cannot_be_sent_is_refused_naming_it(flags, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", *flags])
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


def test_the_prompt_may_come_before_or_after_the_list_flags(served, capsys):
    address, servicer = served
    cli.main(["generate", "--server", address, "--raw", "--bad-words", "darn", "--", "a prompt"])
    cli.main(["generate", "a prompt", "--allowed-token-ids", "5", "6", "--server", address, "--raw"])
    first, second = servicer.requests
    assert (first.text, list(first.sampling.bad_words)) == ("a prompt", ["darn"])
    assert (second.text, list(second.sampling.allowed_token_ids)) == ("a prompt", [5, 6])


def test_the_chat_template_flags_reach_the_chat_prompt(served, capsys, tmp_path):
    address, servicer = served
    cli.main(["generate", "Capital of France?", "--server", address, "--continue", "The capital is",
              "--chat-template-kwargs", '{"enable_thinking": false}'])
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    cli.main(["generate", "Hi", "--server", address, "--no-generation-prompt",
              "--documents", '[{"title": "Paris", "text": "The capital."}]', "--chat-template", f"@{tmp_path}/t.jinja"])
    continued, headless = (request.chat for request in servicer.requests)
    assert json.loads(headless.documents_json) == [{"title": "Paris", "text": "The capital."}]
    assert headless.chat_template == "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert continued.documents_json == "" and continued.chat_template == ""
    assert [(m.role, m.content) for m in continued.messages] == [("user", "Capital of France?"),
                                                                  ("assistant", "The capital is")]
    assert continued.continue_final_message and not continued.HasField("add_generation_prompt")
    assert json.loads(continued.template_kwargs_json) == {"enable_thinking": False}
    assert headless.HasField("add_generation_prompt") and not headless.add_generation_prompt
    assert not headless.continue_final_message and headless.template_kwargs_json == ""


@pytest.mark.parametrize("flags, error", [
    (["--raw", "--continue", "x"], "error: continue: a message to continue needs the chat template (drop --raw)"),
    (["--raw", "--no-generation-prompt"], "error: no-generation-prompt: leaving out the generation prompt needs"),
    (["--raw", "--chat-template-kwargs", "{}"], "error: chat-template-kwargs: a template variable needs the chat"),
    (["--chat-template-kwargs", "[1]"], "error: argument --chat-template-kwargs: must be a JSON object"),
    (["--chat-template-kwargs", "{x"], "error: argument --chat-template-kwargs: is not valid JSON"),
    (["--raw", "--documents", "[]"], "error: documents: documents needs the chat template (drop --raw)"),
    (["--documents", "{}"], "error: argument --documents: must be a JSON array"),
    (["--raw", "--chat-template", "{{ x }}"], "error: chat-template: a chat template needs the chat template"),
    (["--chat-template", "@/nonexistent/template.jinja"], "error: argument --chat-template: cannot read"),
])
def test_a_chat_template_flag_that_cannot_be_sent_is_refused(flags, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", *flags])
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}}}'


@pytest.mark.parametrize("flags, kind, value", [
    (["--json-schema", SCHEMA], "json_schema", SCHEMA),
    (["--json-object"], "json_object", True),
    (["--regex", "[0-9]{3}"], "regex", "[0-9]{3}"),
    (["--choice", "yes", "--choice", "no"], "choice", ["yes", "no"]),
    (["--grammar", 'start: "a" | "b"'], "grammar", 'start: "a" | "b"'),
])
def test_a_structured_output_flag_sets_its_format(served, capsys, flags, kind, value):
    address, servicer = served
    cli.main(["generate", "Hi", "--server", address, "--json", *flags])
    (request,) = servicer.requests
    structured = request.sampling.structured_output
    assert structured.WhichOneof("kind") == kind
    assert (list(structured.choice.choices) if kind == "choice" else getattr(structured, kind)) == value


def test_json_schema_and_grammar_are_read_from_at_path(served, capsys, tmp_path):
    address, servicer = served
    (tmp_path / "schema.json").write_text(SCHEMA + "\n")
    (tmp_path / "g.lark").write_text('start: "x"\n')
    cli.main(["generate", "Hi", "--server", address, "--json-schema", f"@{tmp_path / 'schema.json'}"])
    cli.main(["generate", "Hi", "--server", address, "--grammar", f"@{tmp_path / 'g.lark'}"])
    first, second = (request.sampling.structured_output for request in servicer.requests)
    assert first.json_schema == SCHEMA + "\n" and second.grammar == 'start: "x"\n'


@pytest.mark.parametrize("flags, error", [
    (["--regex", "a", "--choice", "b"], "error: argument --choice: not allowed with argument --regex"),
    (["--json-object", "--json-schema", "{}"],
     "error: argument --json-schema: not allowed with argument --json-object"),
    (["--grammar", "start: 'a'", "--json-object"],
     "error: argument --json-object: not allowed with argument --grammar"),
    (["--json-schema", "{type: object}"], "error: argument --json-schema: is not valid JSON"),
    (["--json-schema", "@/nonexistent/schema.json"],
     "error: argument --json-schema: cannot read '/nonexistent/schema.json'"),
    (["--grammar", "@/nonexistent/g.lark"], "error: argument --grammar: cannot read '/nonexistent/g.lark'"),
    (["--prediction", "x", "--prediction-file", __file__],
     "error: argument --prediction-file: not allowed with argument --prediction"),
    (["--prediction-file", "/nonexistent/p.py"], "error: argument --prediction-file: cannot read '/nonexistent/p.py'"),
])
def test_a_bad_structured_output_or_prediction_flag_is_refused_naming_it(flags, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", *flags])
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


def test_a_schema_file_that_is_not_json_names_the_file(capsys, tmp_path):
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(SystemExit):
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", "--json-schema", f"@{tmp_path / 'bad.json'}"])
    assert f"error: argument --json-schema: {str(tmp_path / 'bad.json')!r} is not valid JSON" in capsys.readouterr().err


class PredictingGeneration(RecordingGeneration):
    """As RecordingGeneration; a request with a prediction hears that 4 of its tokens were accepted, 1 rejected."""

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        for response in super().Generate(request, context):
            if response.HasField("usage") and request.HasField("prediction"):
                response.usage.accepted_prediction_tokens, response.usage.rejected_prediction_tokens = 4, 1
            yield response


def test_a_prediction_is_sent_from_text_or_a_file_and_json_shows_how_it_fared(capsys, tmp_path):
    edited = tmp_path / "edited.py"
    edited.write_bytes("def f():\r\n    return 'é'\n".encode())
    servicer = PredictingGeneration()
    with serving(servicer) as address:
        cli.main(["generate", "Rename f to g", "--server", address, "--json", "--prediction", "def f(): pass"])
        usage = json.loads(capsys.readouterr().out)["usage"]
        assert (usage["accepted_prediction_tokens"], usage["rejected_prediction_tokens"]) == (4, 1)
        cli.main(["generate", "Rename f to g", "--server", address, "--prediction-file", str(edited)])
        assert capsys.readouterr().out == "ok\n"
        cli.main(["generate", "Hi", "--server", address, "--json"])
        usage = json.loads(capsys.readouterr().out)["usage"]
        assert (usage["accepted_prediction_tokens"], usage["rejected_prediction_tokens"]) == (0, 0)
    first, second, third = servicer.requests
    assert first.prediction == "def f(): pass"
    assert second.prediction == "def f():\r\n    return 'é'\n"  # the file as it is, line ends too
    assert not third.HasField("prediction")


def test_a_prediction_file_that_is_not_utf8_names_the_file(capsys, tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(SystemExit):
        cli.main(["generate", "hi", "--server", "127.0.0.1:1", "--prediction-file", str(tmp_path / "latin1.txt")])
    assert f"error: argument --prediction-file: cannot read {str(tmp_path / 'latin1.txt')!r}" in capsys.readouterr().err


def test_wait_for_server_waits_for_a_server_that_starts_late_and_gives_up_after_its_seconds(capsys):
    servicer = RecordingGeneration()
    with serving_later(servicer, after_s=1.0) as late:
        cli.main(["generate", "plain text", "--server", late, "--raw", "--wait-for-server", "30"])
        assert capsys.readouterr().out == "ok\n" and len(servicer.requests) == 1
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "plain text", "--server", unused_address(), "--raw", "--wait-for-server", "0.5"])
    assert exit_info.value.code != 0 and "within 0.5 s" in capsys.readouterr().err


class ToolCallGeneration(generation_pb2_grpc.GenerationServicer):
    """Answers with some text, then a parsed tool call, and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        yield generation_pb2.GenerateResponse(request_id="r", text="Checking.", token_ids=[4], prompt_tokens=3)
        call = generation_pb2.ToolCall(id="call_1", name="get_weather", arguments_json='{"city": "Paris"}')
        yield generation_pb2.GenerateResponse(request_id="r", token_ids=[5], tool_calls=[call],
                                              finish_reason=generation_pb2.FINISH_REASON_STOP)


def test_tools_are_sent_and_parsed_calls_printed_after_the_text(capsys, tmp_path):
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    servicer = ToolCallGeneration()
    with serving(servicer) as address:
        cli.main(["generate", "Weather?", "--server", address, "--tools", f"@{tmp_path / 'tools.json'}"])
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Checking."
        assert json.loads(lines[1]) == {"tool_call": {"id": "call_1", "name": "get_weather",
                                                      "arguments": '{"city": "Paris"}'}}
        cli.main(["generate", "Weather?", "--server", address, "--tools", json.dumps(tools), "--json",
                  "--no-parse-tool-calls"])
        assert json.loads(capsys.readouterr().out)["tool_calls"] == [
            {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
    first, second = servicer.requests
    assert json.loads(first.chat.tools_json) == tools and not first.HasField("parse_tool_calls")
    assert second.HasField("parse_tool_calls") and not second.parse_tool_calls


def test_tools_need_the_chat_template(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["generate", "Weather?", "--raw", "--tools", "[]", "--server", unused_address()])
    assert exited.value.code == 2 and "tools: tools needs the chat template" in capsys.readouterr().err
