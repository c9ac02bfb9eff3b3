"""LoRA adapters on the executor: a request naming an adapter gets peft's greedy tokens for it, in batches that mix
adapters and the base model, with drafts and running ahead; base rows are untouched to the bit; adapters that are
not plain LoRA, or do not fit the model, are refused by name."""

from __future__ import annotations

import json

import pytest
import torch
from step_plans import BATCHES, GREEDY, PlannedRequest, outputs_of, plan_steps, with_blocks
from tiny_adapters import make_peft_adapter, peft_greedy
from tiny_models import make_tiny_glm4, make_tiny_llama, make_tiny_phi3, make_tiny_qwen3, make_tiny_qwen3_moe

from executor_svc.config import ExecutorConfig
from executor_svc.lora.adapter_files import read_adapter
from executor_svc.lora.module_spec import LoraModuleSpec, parse_lora_modules
from executor_svc.lora.projection import AdapterRows, LoraProjection
from executor_svc.model_loader import load_hf_config
from executor_svc.model_runner import StepError
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2

PROMPTS = {"a": [5, 9, 11, 3, 17], "b": [2, 40, 41, 42, 7, 8, 9], "c": [100, 3, 4], "d": list(range(20, 40))}
ADAPTER_OF = {"a": "", "b": "one", "c": "two", "d": "one"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("lora_base") / "model", seed=3)


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    """Two adapters: every projection at rank 4, and q/v only at rank 8 with rsLoRA scaling."""
    root = tmp_path_factory.mktemp("adapters")
    one = make_peft_adapter(model_dir, root / "one", seed=1)
    two = make_peft_adapter(model_dir, root / "two", seed=2, rank=8, alpha=4.0, target_modules=["q_proj", "v_proj"],
                            use_rslora=True)
    return {"one": one, "two": two}


def lora_config(model_dir, adapters, **overrides) -> ExecutorConfig:
    modules = tuple(f"{name}={path}" for name, path in adapters.items())
    return ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, lora_modules=modules, **overrides)


def planned(num_spec: int = 0) -> dict[str, PlannedRequest]:
    return with_blocks({rid: PlannedRequest(prompt, GREEDY, num_spec=num_spec, lora_adapter=ADAPTER_OF[rid])
                        for rid, prompt in PROMPTS.items()})


def tokens_by_request(results: list[executor_pb2.StepResult]) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for result in results:
        for output in result.outputs:
            tokens.setdefault(output.request_id, []).extend(output.token_ids)
    return tokens


def test_each_request_gets_pefts_greedy_tokens_for_its_adapter_in_mixed_batches(model_dir, adapters):
    runner, description = build_runner(lora_config(model_dir, adapters))
    assert list(description.lora_adapters) == ["one", "two"]
    got = tokens_by_request([runner.execute(step) for step in plan_steps(planned(), BATCHES)])
    for rid, tokens in got.items():
        adapter = ADAPTER_OF[rid]
        expected = peft_greedy(model_dir, adapters[adapter] if adapter else None, PROMPTS[rid], len(tokens))
        assert tokens == expected, rid
    # The adapters do change the tokens: the test would catch an adapter left out.
    assert got["b"] != peft_greedy(model_dir, None, PROMPTS["b"], len(got["b"]))
    assert got["c"] != peft_greedy(model_dir, None, PROMPTS["c"], len(got["c"]))


def test_base_rows_are_bit_identical_to_an_executor_without_adapters(model_dir, adapters):
    steps = plan_steps(planned(), BATCHES)
    with_adapters = build_runner(lora_config(model_dir, adapters))[0]
    plain = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40))[0]
    ours = [outputs_of(with_adapters.execute(step)) for step in steps]
    plain_steps = plan_steps({rid: PlannedRequest(p.prompt, p.sampling, block_ids=p.block_ids)
                              for rid, p in planned().items()}, BATCHES)
    reference = [outputs_of(plain.execute(step)) for step in plain_steps]
    for step_ours, step_reference in zip(ours, reference):
        assert [o for o in step_ours if o[0] == "a"] == [o for o in step_reference if o[0] == "a"]


def test_drafts_verified_by_the_adapted_target_keep_pefts_tokens(model_dir, adapters):
    """The n-gram drafter proposes from repeated prompts; the verify steps run the adapters."""
    runner = build_runner(lora_config(model_dir, adapters, spec_method="ngram", num_spec_tokens=2))[0]
    requests = with_blocks({rid: PlannedRequest(PROMPTS[rid][:5] * 3, GREEDY, num_spec=2, lora_adapter=ADAPTER_OF[rid])
                            for rid in PROMPTS})
    results = [runner.execute(step) for step in plan_steps(requests, [list(PROMPTS)] * 10)]
    assert sum(o.num_accepted for r in results for o in r.outputs) > 0
    for rid, tokens in tokens_by_request(results).items():
        adapter = ADAPTER_OF[rid]
        expected = peft_greedy(model_dir, adapters[adapter] if adapter else None, requests[rid].prompt, len(tokens))
        assert tokens == expected, rid


def test_steps_running_ahead_give_the_tokens_of_steps_run_one_at_a_time(model_dir, adapters):
    steps = plan_steps(planned(), BATCHES)
    one_at_a_time = build_runner(lora_config(model_dir, adapters))[0]
    expected = [one_at_a_time.execute(step) for step in steps]
    runner = build_runner(lora_config(model_dir, adapters, defer_token_readback=True))[0]
    launched = [runner.launch(step) for step in steps]
    assert any(state.num_unread_tokens for state in runner.requests.values())
    actual = [runner.complete(item) for item in launched]
    assert [list(r.outputs) for r in actual] == [list(r.outputs) for r in expected]


def _served_greedy(model_dir, adapter, prompt: list[int]) -> list[int]:
    """8 greedy tokens of ``prompt`` from an executor serving ``adapter`` alone, the request naming it."""
    runner = build_runner(lora_config(model_dir, {"a": adapter}))[0]
    request = with_blocks({"r": PlannedRequest(prompt, GREEDY, lora_adapter="a")})
    return tokens_by_request([runner.execute(step) for step in plan_steps(request, [["r"]] * 8)])["r"]


def test_per_module_ranks_and_alphas_and_a_subset_of_layers_match_peft(model_dir, tmp_path):
    """rank_pattern and alpha_pattern resolved as peft resolves them (a key matches a module name's suffix), with
    rsLoRA scaling, on layer 1 only."""
    adapter = make_peft_adapter(model_dir, tmp_path / "patterned", seed=7, rank=4, alpha=8.0,
                                rank_pattern={"layers.1.self_attn.q_proj": 8, "down_proj": 2},
                                alpha_pattern={"v_proj": 3.0}, layers_to_transform=[1], use_rslora=True)
    modules = read_adapter(LoraModuleSpec("p", str(adapter)), load_hf_config(model_dir)).modules
    assert {layer for layer, _ in modules} == {1}
    assert modules[(1, "q_proj")].rank == 8 and modules[(1, "down_proj")].rank == 2
    assert modules[(1, "v_proj")].scaling == pytest.approx(3.0 / 2.0)  # alpha 3 / sqrt(4)
    got = _served_greedy(model_dir, adapter, PROMPTS["b"])
    assert got == peft_greedy(model_dir, adapter, PROMPTS["b"], 8)
    assert got != peft_greedy(model_dir, None, PROMPTS["b"], 8)


def test_qwen3_adapter_matches_peft(tmp_path):
    model_dir = make_tiny_qwen3(tmp_path / "qwen3", seed=4)
    adapter = make_peft_adapter(model_dir, tmp_path / "q3", seed=5, target_modules=["k_proj", "o_proj", "down_proj"])
    assert _served_greedy(model_dir, adapter, [7, 8, 9, 10]) == peft_greedy(model_dir, adapter, [7, 8, 9, 10], 8)


def test_moe_attention_adapters_match_peft_and_mlp_adapters_are_refused(tmp_path):
    """On a MoE model only the attention is adapted; an adapter of the experts (peft adapts their stacked weights
    through target_parameters) is refused by name rather than served without them."""
    model_dir = make_tiny_qwen3_moe(tmp_path / "qwen3_moe", seed=4)
    adapter = make_peft_adapter(model_dir, tmp_path / "attn", seed=5, target_modules=["q_proj", "v_proj", "o_proj"])
    got = _served_greedy(model_dir, adapter, [7, 8, 9, 10])
    assert got == peft_greedy(model_dir, adapter, [7, 8, 9, 10], 8)
    assert got != peft_greedy(model_dir, None, [7, 8, 9, 10], 8)
    mlp_adapter = make_peft_adapter(model_dir, tmp_path / "mlp", seed=6, target_modules=["down_proj"])
    with pytest.raises(ValueError, match=r"target_parameters=\['down_proj'\] is not supported \(plain LoRA only\)"):
        read_adapter(LoraModuleSpec("mlp", str(mlp_adapter)), load_hf_config(model_dir))
    # Layer 1's MLP is dense (mlp_only_layers): a plain adapter of its gate_proj is refused too.
    from safetensors.torch import load_file, save_file

    tensors = load_file(adapter / "adapter_model.safetensors")
    dense = "base_model.model.model.layers.1.mlp.gate_proj.lora_"
    tensors.update({dense + "A.weight": torch.zeros(4, 64), dense + "B.weight": torch.zeros(128, 4)})
    save_file(tensors, adapter / "adapter_model.safetensors")
    with pytest.raises(ValueError, match=r"adapts gate_proj, which this model does not have"):
        read_adapter(LoraModuleSpec("dense", str(adapter)), load_hf_config(model_dir))


def test_phi3_adapters_of_fused_modules_match_peft(tmp_path):
    """peft adapts Phi-3's fused qkv_proj and gate_up_proj as one module each; served as their parts (shared A,
    B's rows), with a rank_pattern on the fused name."""
    model_dir = make_tiny_phi3(tmp_path / "phi3", seed=4)
    adapter = make_peft_adapter(model_dir, tmp_path / "p3", seed=5,
                                target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
                                rank_pattern={"layers.1.self_attn.qkv_proj": 6})
    got = _served_greedy(model_dir, adapter, [7, 8, 9, 10])
    assert got == peft_greedy(model_dir, adapter, [7, 8, 9, 10], 8)
    assert got != peft_greedy(model_dir, None, [7, 8, 9, 10], 8)


def test_glm4_adapters_of_its_fused_gate_up_and_separate_qkv_match_peft(tmp_path):
    model_dir = make_tiny_glm4(tmp_path / "glm4", seed=4)
    adapter = make_peft_adapter(model_dir, tmp_path / "g4", seed=5, target_modules=["q_proj", "v_proj", "gate_up_proj"])
    got = _served_greedy(model_dir, adapter, [7, 8, 9, 10])
    assert got == peft_greedy(model_dir, adapter, [7, 8, 9, 10], 8)
    assert got != peft_greedy(model_dir, None, [7, 8, 9, 10], 8)


def test_an_adapter_of_modules_the_model_does_not_have_is_named(tmp_path, model_dir):
    phi3_dir = make_tiny_phi3(tmp_path / "phi3", seed=4)
    adapter = make_peft_adapter(phi3_dir, tmp_path / "p3", seed=5, target_modules=["qkv_proj"])
    with pytest.raises(ValueError, match=r"adapts qkv_proj, which this model does not have"):
        read_adapter(LoraModuleSpec("p3", str(adapter)), load_hf_config(model_dir))


def test_a_step_naming_an_adapter_the_executor_does_not_serve_is_refused(model_dir, adapters):
    runner = build_runner(lora_config(model_dir, {"one": adapters["one"]}))[0]
    step = plan_steps(with_blocks({"r": PlannedRequest([1, 2, 3], GREEDY, lora_adapter="nope")}), [["r"]])[0]
    with pytest.raises(StepError, match=r"lora_adapter: 'r' names 'nope'; served adapters: \['one'\]"):
        runner.execute(step)
    assert "r" not in runner.requests


def test_rows_without_an_adapter_get_an_update_of_exactly_zero():
    generator = torch.Generator().manual_seed(0)
    shrink, expand = torch.randn(2 * 2 * 3, 5, generator=generator), torch.randn(7, 2 * 2 * 3, generator=generator)
    projection = LoraProjection(shrink, expand, parts=2)
    x = torch.randn(3, 5, generator=generator)
    delta = projection.delta(x, AdapterRows(torch.tensor([-1, 0, 1]), num_slots=2, rank=3, dtype=torch.float32))
    assert torch.equal(delta[0], torch.zeros(7))
    for row, slot in ((1, 0), (2, 1)):  # each row through its own slot's columns of both parts
        columns = [part * 6 + slot * 3 + j for part in range(2) for j in range(3)]
        assert torch.allclose(delta[row], expand[:, columns] @ (shrink[columns] @ x[row]), atol=1e-5)


# ---- refusals -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("entries", "message"), [
    (("one",), "'one' is not NAME=PATH"),
    (("=path",), "is not NAME=PATH"),
    (("a b=path",), "must not contain whitespace"),
    (("x=p", "x=q"), r"repeated: \['x'\]"),
])
def test_malformed_lora_modules_are_refused_naming_the_field(entries, message):
    with pytest.raises(ValueError, match=f"lora_modules: .*{message}"):
        parse_lora_modules(entries)
    with pytest.raises(ValueError, match="lora_modules"):
        ExecutorConfig(model_dir="m", lora_modules=entries)


def _adapter_error(model_dir, adapter_dir) -> str:
    with pytest.raises((ValueError, FileNotFoundError)) as error:
        read_adapter(LoraModuleSpec("bad", str(adapter_dir)), load_hf_config(model_dir))
    return str(error.value)


def test_adapters_that_are_not_plain_lora_are_refused_by_option(model_dir, tmp_path):
    dora = make_peft_adapter(model_dir, tmp_path / "dora", seed=1, use_dora=True)
    assert "use_dora=True is not supported" in _adapter_error(model_dir, dora)
    plain = make_peft_adapter(model_dir, tmp_path / "plain", seed=1)
    config = json.loads((plain / "adapter_config.json").read_text())
    for option, value in (("layer_replication", [[0, 2]]), ("bias", "all"), ("peft_type", "IA3")):
        changed = tmp_path / option
        changed.mkdir()
        (changed / "adapter_config.json").write_text(json.dumps({**config, option: value}))
        (changed / "adapter_model.safetensors").write_bytes((plain / "adapter_model.safetensors").read_bytes())
        assert option in _adapter_error(model_dir, changed)


def test_adapters_that_do_not_fit_the_model_are_refused_by_tensor(model_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    assert "adapter_config.json is missing" in _adapter_error(model_dir, tmp_path)
    plain = make_peft_adapter(model_dir, tmp_path / "plain", seed=1)
    tensors = load_file(plain / "adapter_model.safetensors")
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    cases = {
        "shape": {**tensors, key: torch.zeros(4, 32)},
        "embed": {**tensors, "base_model.model.model.embed_tokens.lora_embedding_A": torch.zeros(4, 256)},
        "layer": {**tensors, key.replace("layers.0", "layers.9"): tensors[key].clone()},
        "half": {name: t for name, t in tensors.items() if name != key},
    }
    expected = {"shape": "has shape (4, 32), expected (4, 64)", "embed": "is not a LoRA A/B weight",
                "layer": "names layer 9; the model has 2", "half": "has lora_B but not both A and B"}
    for case, case_tensors in cases.items():
        directory = tmp_path / case
        directory.mkdir()
        (directory / "adapter_config.json").write_text((plain / "adapter_config.json").read_text())
        save_file(case_tensors, directory / "adapter_model.safetensors")
        assert expected[case] in _adapter_error(model_dir, directory), case


def graphed_runner(model_dir, adapters, **overrides):
    from executor_svc.cuda_graphs.step_graphs import EagerStandIn

    config = lora_config(model_dir, adapters, attention_backend="torch_padded", max_num_seqs=4, **overrides)
    return build_runner(config, make_capture=EagerStandIn)[0]


def test_steps_mixing_adapters_and_the_base_model_replay_a_graph_with_pefts_tokens(model_dir, adapters):
    """The stand-in re-runs the captured function at each replay: reading anything but the static buffers (the
    adapter slots included) would change the tokens, as a real CUDA graph would."""
    runner = graphed_runner(model_dir, adapters)
    requests = {rid: request for rid, request in planned().items() if rid != "d"}
    steps = plan_steps(requests, [["a", "b", "c"]] * 6)
    got = tokens_by_request([runner.execute(step) for step in steps])
    assert runner.forward.num_replays == 5  # every decode step, each with rows of both adapters and the base model
    for rid, tokens in got.items():
        adapter = ADAPTER_OF[rid]
        assert tokens == peft_greedy(model_dir, adapters[adapter] if adapter else None, PROMPTS[rid], 6), rid


def test_a_replayed_adapter_step_running_ahead_waits_for_nothing_on_the_host(model_dir, adapters):
    from host_syncs import recorded_host_syncs

    runner = graphed_runner(model_dir, adapters, defer_token_readback=True)
    steps = plan_steps({rid: request for rid, request in planned().items() if rid != "d"}, [["a", "b", "c"]] * 3)
    runner.launch(steps[0])
    runner.launch(steps[1])
    with recorded_host_syncs() as syncs:
        runner.launch(steps[2])
    assert syncs == []
    assert runner.forward.num_replays == 2


@pytest.mark.gpu
def test_cuda_graph_replays_of_adapter_steps_give_pefts_tokens(model_dir, adapters):
    """On CUDA (fp32, real graphs, the backend auto picks): steps mixing both adapters and the base model replay
    their captured graphs and give peft's greedy tokens. Skipped without CUDA."""
    runner = build_runner(lora_config(model_dir, adapters, device="cuda", dtype="float32", max_num_seqs=4))[0]
    requests = {rid: request for rid, request in planned().items() if rid != "d"}
    got = tokens_by_request([runner.execute(step) for step in plan_steps(requests, [["a", "b", "c"]] * 8)])
    assert runner.forward.num_replays == 7
    for rid, tokens in got.items():
        adapter = ADAPTER_OF[rid]
        assert tokens == peft_greedy(model_dir, adapters[adapter] if adapter else None, PROMPTS[rid], 8), rid


# ---- loading and unloading while serving ----------------------------------------------------------------------


def run_alone(runner, rid: str, adapter: str, prompt: list[int], steps: int = 6) -> list[int]:
    request = with_blocks({rid: PlannedRequest(prompt, GREEDY, lora_adapter=adapter)})
    return tokens_by_request([runner.execute(step) for step in plan_steps(request, [[rid]] * steps)])[rid]


def test_adapters_loaded_while_serving_fill_free_slots_and_give_pefts_tokens(model_dir, adapters):
    runner, description = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, max_loras=2,
                                                      max_lora_rank=8))
    assert description.max_loras == 2 and description.max_lora_rank == 8 and not description.lora_adapters
    assert runner.load_lora_adapter("one", str(adapters["one"])).code == "OK"
    assert run_alone(runner, "r1", "one", PROMPTS["b"]) == peft_greedy(model_dir, adapters["one"], PROMPTS["b"], 6)
    assert runner.load_lora_adapter("one", str(adapters["one"])).code == "OK"  # again, same path: a no-op
    assert runner.load_lora_adapter("one", str(adapters["two"])).code == "ALREADY_EXISTS"
    change = runner.load_lora_adapter("two", str(adapters["two"]))
    assert (change.code, change.adapters) == ("OK", ("one", "two"))
    full = runner.load_lora_adapter("three", str(adapters["one"]))
    assert full.code == "RESOURCE_EXHAUSTED" and "all 2 adapter slots are in use" in full.message
    assert runner.unload_lora_adapter("one").adapters == ("two",)
    assert runner.unload_lora_adapter("one").code == "NOT_FOUND"
    with pytest.raises(StepError, match="lora_adapter: 'r2' names 'one'"):
        run_alone(runner, "r2", "one", PROMPTS["b"])
    # The freed slot takes an adapter of other projections: nothing of the first one is left in it.
    assert runner.load_lora_adapter("again", str(adapters["two"])).code == "OK"
    assert run_alone(runner, "r3", "again", PROMPTS["c"]) == peft_greedy(model_dir, adapters["two"], PROMPTS["c"], 6)
    assert run_alone(runner, "r4", "", PROMPTS["c"]) == peft_greedy(model_dir, None, PROMPTS["c"], 6)


def test_a_load_that_cannot_be_served_is_refused_by_code_and_changes_nothing(model_dir, adapters, tmp_path):
    runner = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, max_loras=1,
                                         max_lora_rank=4))[0]
    missing = runner.load_lora_adapter("x", str(tmp_path / "missing"))
    assert missing.code == "INVALID_ARGUMENT" and "adapter_config.json is missing" in missing.message
    too_big = runner.load_lora_adapter("two", str(adapters["two"]))  # rank 8
    assert too_big.code == "INVALID_ARGUMENT" and "rank 8 is above the executor's --max-lora-rank 4" in too_big.message
    assert runner.lora is not None and runner.lora.names == ()
    off = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40))[0]
    assert off.load_lora_adapter("one", str(adapters["one"])).code == "FAILED_PRECONDITION"
    with pytest.raises(ValueError, match=r"max_loras: must be in \[2 \(the --lora-modules count\), 64\], got 1"):
        lora_config(model_dir, adapters, max_loras=1)


def test_an_adapter_loaded_after_the_graphs_were_captured_replays_in_them(model_dir, adapters):
    runner = graphed_runner(model_dir, {}, max_loras=1, max_lora_rank=4)
    assert runner.load_lora_adapter("one", str(adapters["one"])).code == "OK"
    tokens = run_alone(runner, "r", "one", PROMPTS["a"])
    assert runner.forward.num_replays == 5
    assert tokens == peft_greedy(model_dir, adapters["one"], PROMPTS["a"], 6)


def test_the_captured_step_with_adapters_compiles_as_one_graph_without_host_syncs(model_dir, adapters):
    """torch.compile(fullgraph=True) fails on any graph break: what a CUDA graph records with adapter rows is one
    program (unpacked weights, as on a GPU), and it reads nothing back to the host."""
    from host_syncs import recorded_host_syncs

    runner = graphed_runner(model_dir, adapters, cpu_weight_packing=False)
    graphs = runner.forward.graphs
    assert graphs is not None
    shapes = []
    replay = graphs.run
    graphs.run = lambda batch, shape, resolve: shapes.append(shape) or replay(batch, shape, resolve)  # type: ignore
    requests = {rid: request for rid, request in planned().items() if rid != "d"}
    for step in plan_steps(requests, [["a", "b", "c"]] * 2):
        runner.execute(step)
    (shape,) = shapes  # the decode step's inputs are still in the static buffers
    with torch.inference_mode(), recorded_host_syncs() as syncs:
        eager = graphs._forward(shape).clone()
    assert syncs == []
    compiled = torch.compile(lambda: graphs._forward(shape), fullgraph=True, dynamic=False)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(), eager, atol=1e-5, rtol=1e-5)
