"""Default sampling from the model's generation_config.json (vLLM's --generation-config): read and checked at start,
applied to exactly the fields a request leaves unset, max_new_tokens as the default max_tokens."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.generation_defaults import GenerationDefaults
from scheduler_svc.server import model_limits
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request
from stepahead_proto import executor_pb2, generation_pb2, sampling_pb2

QWEN_LIKE = {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 7], "temperature": 0.7, "top_p": 0.8,
             "top_k": 20, "repetition_penalty": 1.05, "transformers_version": "4.45"}


def write(directory, config: dict) -> str:
    (directory / "generation_config.json").write_text(json.dumps(config))
    return str(directory)


def test_the_sampling_keys_are_read_and_the_rest_ignored(tmp_path):
    defaults = GenerationDefaults.load("auto", write(tmp_path, QWEN_LIKE))
    assert defaults.sampling_values == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    assert defaults.max_new_tokens is None
    assert GenerationDefaults.load("none", str(tmp_path)) == GenerationDefaults()
    assert GenerationDefaults.load("auto", str(tmp_path / "elsewhere")) == GenerationDefaults()  # no file: none
    other = tmp_path / "other"
    other.mkdir()
    assert GenerationDefaults.load(write(other, {"min_p": 0.1, "top_k": 0}), "unused").sampling_values == {
        "top_k": -1, "min_p": 0.1}


@pytest.mark.parametrize(("config", "message"), [
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"top_k": 2.5}, "top_k must be an integer"),
    ({"repetition_penalty": 0}, "repetition_penalty must be a number > 0"),
    ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
    ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
])
def test_a_bad_value_is_an_error_naming_the_file_and_key(tmp_path, config, message):
    with pytest.raises(ValueError, match=f"generation_config.json: {message}".replace("(", r"\(").replace(")", r"\)")):
        GenerationDefaults.load("auto", write(tmp_path, config))


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path):
    (tmp_path / "generation_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        GenerationDefaults.load("auto", str(tmp_path))
    (tmp_path / "generation_config.json").write_text("{")
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        GenerationDefaults.load("auto", str(tmp_path))


def test_only_unset_fields_take_the_defaults():
    defaults = GenerationDefaults(temperature=0.7, top_p=0.8, min_p=0.05)
    given = sampling_pb2.SamplingParams(temperature=0.0, min_p=0.0, seed=3)
    filled = defaults.apply(given)
    assert (filled.temperature, filled.top_p, filled.min_p, filled.seed) == (0.0, pytest.approx(0.8), 0.0, 3)
    assert not given.HasField("top_p")  # the request's own message is left as it was
    assert GenerationDefaults().apply(given) is given


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("defaults")))


def test_the_scheduler_applies_them_and_max_new_tokens_is_the_default_max_tokens(tmp_path, tokenizer):
    model_dir = write(tmp_path, {**QWEN_LIKE, "max_new_tokens": 40})
    config = SchedulerServiceConfig(model_dir=model_dir, executor_addresses=("127.0.0.1:1",))
    description = executor_pb2.ExecutorDescription(model="m", max_model_len=128, vocab_size=tokenizer.vocab_size,
                                                   num_kv_blocks=64, block_size=16, eos_token_ids=[2])
    limits = model_limits(config, [description], tokenizer)
    assert limits.default_max_tokens == 40 and limits.generation_defaults.top_k == 20
    request = build_request(generation_pb2.GenerateRequest(text="Hello", sampling=sampling_pb2.SamplingParams(
        top_k=5)), tokenizer, limits)
    assert (request.sampling.temperature, request.sampling.top_k) == (pytest.approx(0.7), 5)
    assert request.stop_params.max_tokens == 40
    off = model_limits(SchedulerServiceConfig(model_dir=model_dir, executor_addresses=("127.0.0.1:1",),
                                              generation_config="none"), [description], tokenizer)
    assert off.generation_defaults == GenerationDefaults() and off.default_max_tokens == 256
    plain = build_request(generation_pb2.GenerateRequest(text="Hello"), tokenizer,
                          ModelLimits("m", 128, tokenizer.vocab_size, frozenset({2}), 16))
    assert not plain.sampling.HasField("temperature")


def test_the_config_refuses_a_setting_that_is_no_directory(tmp_path):
    with pytest.raises(ValueError, match="^generation_config: must be auto, none or a directory"):
        SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",),
                               generation_config=str(tmp_path / "missing"))
