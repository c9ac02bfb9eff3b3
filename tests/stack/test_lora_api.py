"""LoRA adapters through real processes: a request naming an adapter as its model gets peft's greedy tokens for that
adapter, alone and in batches mixing adapters and the base model, with the n-gram drafter and the scheduler running
ahead; prefix caching shares blocks only between requests of the same adapter; an unknown name is refused by field;
the OpenAI front serves and lists the adapters."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from tiny_adapters import make_peft_adapter, peft_greedy

from client import Client, InvalidArgumentError

pytestmark = pytest.mark.stack

PROMPTS = [[5, 17, 33, 64, 90, 120, 48, 3, 11, 200], [7, 8, 9, 10, 11] * 3, [300, 12, 45, 6], [44, 45, 46, 47, 48]]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("stack_adapters")
    return {"one": make_peft_adapter(tiny_model_dir, root / "one", seed=1),
            "two": make_peft_adapter(tiny_model_dir, root / "two", seed=2, rank=8, target_modules=["q_proj", "v_proj"])}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, adapters, launch_module_stack):
    modules = [f"{name}={path}" for name, path in adapters.items()]
    return launch_module_stack(tiny_model_dir, ["--spec-method", "ngram", "--num-spec-tokens", "3",
                                                "--lora-modules", *modules],
                               ["--enable-prefix-caching", "--http-port", "0"])


@pytest.fixture(scope="module")
def references(tiny_model_dir, adapters):
    return {(model, index): peft_greedy(tiny_model_dir, adapters.get(model), prompt, MAX_TOKENS)
            for model in ("", "one", "two") for index, prompt in enumerate(PROMPTS)}


def greedy(client: Client, model: str, prompt: list[int]) -> list[int]:
    result = client.generate(token_ids=prompt, temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, model=model)
    return list(result.token_ids)


def assert_all_blocks_free(client: Client) -> None:
    info = client.model_info()
    assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0


def test_model_info_lists_the_adapters(stack):
    with Client(stack.address) as client:
        assert list(client.model_info().lora_adapters) == ["one", "two"]


def test_each_request_gets_pefts_tokens_for_its_adapter_one_by_one_and_all_at_once(stack, references):
    cases = list(references)
    with Client(stack.address) as client:
        one_by_one = {case: greedy(client, case[0], PROMPTS[case[1]]) for case in cases}
        with ThreadPoolExecutor(len(cases)) as pool:
            together = dict(zip(cases, pool.map(lambda case: greedy(client, case[0], PROMPTS[case[1]]), cases)))
        assert_all_blocks_free(client)
    assert one_by_one == references
    assert together == references
    assert all(references[("one", i)] != references[("", i)] for i in range(len(PROMPTS)))  # the adapter matters


def test_cached_prefixes_are_shared_only_between_requests_of_one_adapter(stack, tiny_model_dir, adapters):
    prompt = [(13 * i) % 390 + 3 for i in range(50)]  # three full blocks of 16 to cache
    base, one = peft_greedy(tiny_model_dir, None, prompt, MAX_TOKENS), peft_greedy(tiny_model_dir, adapters["one"],
                                                                                   prompt, MAX_TOKENS)
    with Client(stack.address) as client:
        def hits() -> int:
            return client.model_info().stats.prefix_cache_hit_tokens

        start = hits()
        assert greedy(client, "", prompt) == base
        assert greedy(client, "one", prompt) == one  # the base model's blocks hold other KV: not reused
        assert hits() == start
        assert greedy(client, "one", prompt) == one
        assert hits() - start == 48
        assert greedy(client, "", prompt) == base
        assert hits() - start == 96


def test_an_unknown_model_is_refused_naming_the_field_and_the_adapters(stack):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match=r"model: unknown model 'three'.*\['one', 'two'\]"):
            client.generate(token_ids=PROMPTS[0], max_tokens=4, model="three")
        assert_all_blocks_free(client)


def test_the_openai_front_lists_and_serves_the_adapters(stack, references):
    api = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0)
    ids = [model.id for model in api.models.list().data]
    assert ids[1:] == ["one", "two"]
    completion = api.completions.create(model="two", prompt=PROMPTS[2], max_tokens=MAX_TOKENS, temperature=0.0,
                                        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
                                        logprobs=0)
    assert completion.model == "two"
    tokens = [int(token.split(":")[1]) for token in completion.choices[0].logprobs.tokens]
    assert tokens == references[("two", 2)]
    with pytest.raises(openai.NotFoundError):
        api.completions.create(model="three", prompt="hi", max_tokens=2)


def test_adapter_requests_survive_a_killed_executor_token_for_token(stack):
    """kill -9 the executor while 16 requests of both adapters and the base model stream; the restarted executor
    is sent each request again with its adapter, and every request ends with the undisturbed run's tokens."""
    import asyncio

    from test_executor_recovery import kill_and_restart

    from client import AsyncClient

    models = ["", "one", "two", "one"] * 4

    async def generate_all(on_all_started=None) -> list[list[int]]:
        outputs: list[list[int]] = [[] for _ in models]
        started = asyncio.Event()

        async def one(client: AsyncClient, index: int) -> None:
            group = index // 4  # four requests per prompt: the base model, one, two, one
            async for chunk in client.generate_stream(token_ids=[5 + group, 6, 7 + group, 8], max_tokens=160,
                                                      ignore_eos=True, temperature=0.0, model=models[index]):
                outputs[index] += chunk.token_ids
                if all(outputs):
                    started.set()

        async with AsyncClient(stack.address, timeout=120) as client:
            tasks = [asyncio.create_task(one(client, i)) for i in range(len(models))]
            if on_all_started is not None:
                await started.wait()
                await asyncio.to_thread(on_all_started)
            await asyncio.gather(*tasks)
        return outputs

    undisturbed = asyncio.run(generate_all())
    disturbed = asyncio.run(generate_all(lambda: kill_and_restart(stack)))
    assert disturbed == undisturbed and all(len(tokens) == 160 for tokens in disturbed)
    assert disturbed[1] == disturbed[3] != disturbed[0] != disturbed[2]  # one prompt: the adapter decides the tokens
    with Client(stack.address) as client:
        assert_all_blocks_free(client)


# ---- loading and unloading adapters while serving ----------------------------------------------------------------


@pytest.fixture(scope="module")
def updating_stack(tiny_model_dir, launch_module_stack):
    """Two tensor-parallel ranks with two free adapter slots (rank up to 8) and no adapter at start; the scheduler
    lets clients load and unload adapters."""
    return launch_module_stack(tiny_model_dir, ["--tensor-parallel-size", "2", "--max-loras", "2",
                                                "--max-lora-rank", "8"],
                               ["--enable-prefix-caching", "--allow-runtime-lora-updating"])


def test_adapters_loaded_while_serving_give_pefts_tokens_and_unloaded_ones_are_refused(updating_stack, adapters,
                                                                                       tiny_model_dir):
    from client import AlreadyExistsError, NotFoundError, ResourceExhaustedError

    prompt = [(13 * i) % 390 + 3 for i in range(50)]  # three full blocks: cached under the adapter's key
    with Client(updating_stack.address) as client:
        assert client.model_info().max_loras == 2
        assert client.load_lora_adapter("one", str(adapters["one"])) == ("one",)
        assert greedy(client, "one", prompt) == peft_greedy(tiny_model_dir, adapters["one"], prompt, MAX_TOKENS)
        with pytest.raises(AlreadyExistsError, match="lora_name: 'one' is already served"):
            client.load_lora_adapter("one", str(adapters["two"]))
        assert client.load_lora_adapter("two", str(adapters["two"])) == ("one", "two")
        with pytest.raises(ResourceExhaustedError, match="2 adapter slots, all in use"):
            client.load_lora_adapter("three", str(adapters["one"]))
        assert client.unload_lora_adapter("one") == ("two",)
        with pytest.raises(NotFoundError, match="lora_name: 'one' is not served"):
            client.unload_lora_adapter("one")
        with pytest.raises(InvalidArgumentError, match="model: unknown model 'one'"):
            greedy(client, "one", prompt)
        # The name again, other weights: the blocks the first "one" cached must not be found.
        assert client.load_lora_adapter("one", str(adapters["two"])) == ("two", "one")
        assert greedy(client, "one", prompt) == peft_greedy(tiny_model_dir, adapters["two"], prompt, MAX_TOKENS)
        assert list(client.model_info().lora_adapters) == ["two", "one"]
        assert_all_blocks_free(client)


def test_a_load_the_executors_refuse_changes_nothing(updating_stack, tmp_path):
    with Client(updating_stack.address) as client:
        for name in client.model_info().lora_adapters:  # free the slots an earlier test took
            client.unload_lora_adapter(name)
        before = client.model_info().lora_adapters
        with pytest.raises(InvalidArgumentError, match="lora_path: .*adapter_config.json is missing"):
            client.load_lora_adapter("broken", str(tmp_path))
        with pytest.raises(InvalidArgumentError, match="lora_name: must be a non-empty name without whitespace"):
            client.load_lora_adapter("a b", str(tmp_path))
        assert client.model_info().lora_adapters == before


def test_a_replaced_executor_is_sent_the_adapters_loaded_while_serving(updating_stack, adapters, tiny_model_dir):
    from test_executor_recovery import kill_and_restart

    with Client(updating_stack.address) as client:
        if "two" not in client.model_info().lora_adapters:
            client.load_lora_adapter("two", str(adapters["two"]))
        kill_and_restart(updating_stack)
        tokens = greedy(client, "two", PROMPTS[0])
    assert tokens == peft_greedy(tiny_model_dir, adapters["two"], PROMPTS[0], MAX_TOKENS)


def test_updating_adapters_is_refused_without_the_schedulers_flag(stack, adapters):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match="start the scheduler with --allow-runtime-lora-updating"):
            client.load_lora_adapter("three", str(adapters["one"]))


def test_the_lora_command_lists_loads_and_unloads(updating_stack, adapters, capsys):
    from client.cli import main

    def run(*argv: str) -> str:
        main(["lora", *argv, "--server", updating_stack.address])
        return capsys.readouterr().out

    with Client(updating_stack.address) as client:
        for name in client.model_info().lora_adapters:
            client.unload_lora_adapter(name)
    assert run("list") == "0 of 2 adapter slots in use\n(none)\n"
    assert run("load", "cli", str(adapters["one"])) == "cli\n"
    assert run("list") == "1 of 2 adapter slots in use\ncli\n"
    with pytest.raises(SystemExit) as exit_info:
        run("unload", "nope")
    assert exit_info.value.code == 2 and "lora_name: 'nope' is not served" in capsys.readouterr().err
    assert run("unload", "cli") == "(none)\n"
