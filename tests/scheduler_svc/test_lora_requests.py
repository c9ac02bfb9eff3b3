"""A request names a LoRA adapter as its model: the scheduler checks the name, sends the adapter with the new request,
keeps the adapter's cached blocks apart from the base model's, and every executor group must serve the same
adapters."""

from __future__ import annotations

import pytest
from test_executor_connections import config, connection, description
from tiny_tokenizers import build_byte_level

from scheduler_svc.executor_connections import check_same_model
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.prefix_hashes import extend_block_hashes
from scheduler_svc.scheduler_output import ScheduledNewRequest, SchedulerOutput
from scheduler_svc.server import model_limits
from scheduler_svc.step_codec import to_step_request
from scheduler_svc.tokenization import tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request, check_model_name
from stepahead_proto import generation_pb2


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("lora_tokenizer")))


LIMITS = ModelLimits("tiny", 128, 400, frozenset({2}), 16, adapters=ServedAdapters(("sql", "chat-fr")))


def test_the_served_name_and_each_adapter_are_valid_models():
    assert check_model_name("", LIMITS) == ""
    assert check_model_name("tiny", LIMITS) == ""
    assert check_model_name("sql", LIMITS) == "sql"
    assert check_model_name("chat-fr", LIMITS) == "chat-fr"


def test_an_unknown_model_is_refused_listing_the_adapters():
    with pytest.raises(InvalidRequestError, match=r"unknown model 'Sql'; served: 'tiny' and LoRA adapters "
                                                  r"\['sql', 'chat-fr'\]") as error:
        check_model_name("Sql", LIMITS)
    assert error.value.field == "model"
    plain = ModelLimits("tiny", 128, 400, frozenset({2}), 16)
    with pytest.raises(InvalidRequestError, match=r"served: 'tiny'$"):
        check_model_name("sql", plain)


def test_the_executor_receives_the_adapter_with_the_new_request(tokenizer):
    pb = generation_pb2.GenerateRequest(model="sql", text="hello")
    request = build_request(pb, tokenizer, LIMITS)
    assert request.lora_adapter == "sql"
    assert build_request(generation_pb2.GenerateRequest(model="tiny", text="hello"), tokenizer, LIMITS
                         ).lora_adapter == ""
    sent = to_step_request(SchedulerOutput(step_id=0, new_requests=[ScheduledNewRequest(request, [0], 0, 2)]))
    assert sent.new_requests[0].lora_adapter == "sql"


def test_tokenize_accepts_an_adapter_name(tokenizer):
    with_adapter = tokenize(generation_pb2.TokenizeRequest(model="chat-fr", text="hello"), tokenizer, LIMITS)
    base = tokenize(generation_pb2.TokenizeRequest(text="hello"), tokenizer, LIMITS)
    assert list(with_adapter.token_ids) == list(base.token_ids) and base.token_ids


def test_an_adapters_blocks_hash_apart_from_the_base_models_and_other_adapters():
    tokens = list(range(12))
    base = extend_block_hashes([], tokens, 4)
    sql = extend_block_hashes([], tokens, 4, "sql")
    assert len(sql) == 3 and not set(sql) & set(base)
    assert not set(sql) & set(extend_block_hashes([], tokens, 4, "chat-fr"))
    assert extend_block_hashes([], tokens, 4, "sql") == sql
    assert extend_block_hashes(sql[:1], tokens, 4, "sql") == sql  # extending keeps the adapter's chain


def test_every_group_must_serve_the_same_adapters():
    check_same_model([connection("a:1", lora_adapters=["sql"]), connection("b:2", lora_adapters=["sql"])])
    with pytest.raises(ValueError, match=r"a:1 has lora_adapters \['sql'\] but b:2 has \[\]"):
        check_same_model([connection("a:1", lora_adapters=["sql"]), connection("b:2")])


def test_the_limits_carry_the_adapters_and_an_adapter_may_not_take_the_models_name():
    from types import SimpleNamespace

    tokenizer = SimpleNamespace(eos_token_ids=[2])
    limits = model_limits(config(("a:1",)), [description(lora_adapters=["sql"])], tokenizer)  # type: ignore[arg-type]
    assert limits.lora_adapters == ("sql",)
    with pytest.raises(ValueError, match="lora_modules: adapter name 'tiny' is the served model's name"):
        model_limits(config(("a:1",)), [description(lora_adapters=["tiny"])], tokenizer)  # type: ignore[arg-type]


class UnloadedWhileChecked(ServedAdapters):
    """Its adapter "sql" is unloaded right after the first look at what is served (its names or a key): as the event
    loop may unload an adapter while a request naming it is validated in a worker thread (long prompts and
    structured output requests are, prompt_work.py)."""

    @property
    def names(self) -> tuple[str, ...]:
        return self._unloading_after(super().names)

    def cache_key(self, name: str) -> str | None:
        return self._unloading_after(super().cache_key(name))

    def _unloading_after(self, answer):
        if "sql" in self:
            self.remove("sql")
        return answer


def test_an_adapter_unloaded_during_validation_is_served_or_unknown_never_a_crash(tokenizer):
    limits = ModelLimits("tiny", 128, 400, frozenset({2}), 16, adapters=UnloadedWhileChecked(("sql",)))
    try:
        request = build_request(generation_pb2.GenerateRequest(model="sql", text="hello"), tokenizer, limits)
    except InvalidRequestError as error:
        assert error.field == "model"
    else:
        assert request.lora_adapter == "sql" and request.adapter_cache_key
    with pytest.raises(InvalidRequestError, match="unknown model 'sql'"):  # it is gone now
        build_request(generation_pb2.GenerateRequest(model="sql", text="hello"), tokenizer, limits)
