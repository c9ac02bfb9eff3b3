"""Our Llama-family model over a paged KV cache must reproduce HF transformers' logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from quantized_checkpoints import (
    REFERENCE,
    awq,
    compressed_tensors_channels,
    compressed_tensors_packed,
    fp8_blocks,
    gptq,
)
from tiny_models import (
    make_tiny_apertus,
    make_tiny_arcee,
    make_tiny_cohere,
    make_tiny_cohere2,
    make_tiny_deepseek_v2,
    make_tiny_deepseek_v3,
    make_tiny_dots1,
    make_tiny_ernie4_5,
    make_tiny_ernie4_5_moe,
    make_tiny_exaone4,
    make_tiny_flex_olmo,
    make_tiny_gemma,
    make_tiny_gemma2,
    make_tiny_gemma3,
    make_tiny_gemma3_vision,
    make_tiny_glm,
    make_tiny_glm4,
    make_tiny_glm4_moe,
    make_tiny_glm4_moe_lite,
    make_tiny_gpt_oss,
    make_tiny_granite,
    make_tiny_granite_moe,
    make_tiny_hunyuan_dense,
    make_tiny_hunyuan_moe,
    make_tiny_llama,
    make_tiny_llama4,
    make_tiny_llama4_vision,
    make_tiny_minimax_m2,
    make_tiny_ministral,
    make_tiny_ministral3,
    make_tiny_mistral,
    make_tiny_mistral3_vision,
    make_tiny_mistral4,
    make_tiny_mixtral,
    make_tiny_nemotron,
    make_tiny_olmo2,
    make_tiny_olmo3,
    make_tiny_olmoe,
    make_tiny_phi2,
    make_tiny_phi3,
    make_tiny_qwen2,
    make_tiny_qwen2_5_vl_vision,
    make_tiny_qwen2_moe,
    make_tiny_qwen2_vl_vision,
    make_tiny_qwen3,
    make_tiny_qwen3_moe,
    make_tiny_qwen3_vl_moe_vision,
    make_tiny_qwen3_vl_vision,
    make_tiny_seed_oss,
    make_tiny_smollm3,
    make_tiny_starcoder2,
)

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_model
from executor_svc.models.kv_layout import kv_layout
from executor_svc.models.layers import pack_for_cpu_matmul
from executor_svc.models.llama_weights import load_weights
from executor_svc.models.rope import rope_context_limit, rope_frequencies, rope_parameters

BLOCK_SIZE = 16
NUM_BLOCKS = 40
BLOCKS_PER_SEQ = 4
ATOL = 1e-4
# Scaled RoPE types on the tiny checkpoints: frequencies far enough from the default's to change every logit.
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
YARN_ROPE = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128}
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [2.0, 4.0, 8.0, 16.0],
            "original_max_position_embeddings": 128}
MAKERS = {
    "llama": make_tiny_llama,
    "llama_llama3_rope": lambda path, seed: make_tiny_llama(path, seed, rope_parameters=LLAMA3_ROPE),
    "llama_yarn_rope": lambda path, seed: make_tiny_llama(path, seed, rope_parameters=YARN_ROPE),
    "qwen2": make_tiny_qwen2,
    "qwen2_sliding_layers": lambda path, seed: make_tiny_qwen2(path, seed, use_sliding_window=True, sliding_window=6,
                                                                max_window_layers=1),
    "qwen3": make_tiny_qwen3,
    "mistral_sliding_window": make_tiny_mistral,
    "phi3_partial_rope": make_tiny_phi3,
    # Phi-3 configs keep original_max_position_embeddings at the top level too (HF prefers that one).
    "phi3_longrope": lambda path, seed: make_tiny_phi3(path, seed, rope_parameters=LONGROPE,
                                                       original_max_position_embeddings=128),
    "gemma": make_tiny_gemma,
    "gemma2": make_tiny_gemma2,
    "gemma3": make_tiny_gemma3,
    "granite": make_tiny_granite,
    "mixtral": make_tiny_mixtral,
    "qwen2_moe_shared_expert": make_tiny_qwen2_moe,
    "qwen3_moe_dense_layer": make_tiny_qwen3_moe,
    "granite_moe_shared": make_tiny_granite_moe,
    "granite_moe": lambda path, seed: make_tiny_granite_moe(path, seed, shared_intermediate_size=0),
    "olmo2_output_norms": make_tiny_olmo2,
    "olmo3_sliding_layers": make_tiny_olmo3,
    "olmoe": make_tiny_olmoe,
    "flex_olmo_output_norms_experts": make_tiny_flex_olmo,
    # DeepSeek-V3-style routing (sigmoid scores, correction bias, expert groups, shared experts, a dense first layer)
    "glm4_moe_grouped_sigmoid_routing": make_tiny_glm4_moe,
    "dots1_sigmoid_routing": make_tiny_dots1,
    # Latent attention (models/mla.py): DeepSeek-V3 (a q latent, biases, V3's routing), V2-Lite (q straight, softmax
    # routing within groups), GLM-4.7-Flash; and V3 with YaRN's mscale in the softmax scale.
    "deepseek_v3_latent_attention_biased": lambda path, seed: make_tiny_deepseek_v3(path, seed, attention_bias=True),
    "deepseek_v3_yarn_mscale": lambda path, seed: make_tiny_deepseek_v3(path, seed, rope_parameters={
        **YARN_ROPE, "mscale": 0.8, "mscale_all_dim": 0.8}),
    "deepseek_v2_lite_latent_attention": make_tiny_deepseek_v2,
    "glm4_moe_lite_latent_attention": make_tiny_glm4_moe_lite,
    # Mistral 4: V3's latent attention and groups, softmax routing, YaRN and the query temperature on every layer
    "mistral4_latent_attention_query_temperature": make_tiny_mistral4,
    # SmolLM3: layer 1 uses no positions (NoPE) and, here, slides over 6 of them.
    "smollm3_nope_layers": lambda path, seed: make_tiny_smollm3(path, seed, use_sliding_window=True,
                                                                sliding_window=6),
    "ministral_sliding_layers": make_tiny_ministral,
    # GLM: interleaved partial RoPE, q/k/v biases, a fused gate_up_proj; GLM-4 adds its sandwich norms.
    "glm": make_tiny_glm,
    "glm4": make_tiny_glm4,
    # Cohere: LayerNorm, attention and MLP side by side, interleaved RoPE, a logit scale; Cohere 2 adds sliding
    # layers with RoPE and global ones without.
    "cohere_parallel_layernorm": make_tiny_cohere,
    "cohere_qk_layernorm_per_head": lambda path, seed: make_tiny_cohere(path, seed, use_qk_norm=True),  # R+
    "cohere2_sliding_and_nope_layers": make_tiny_cohere2,
    # LayerNorms with biases and MLPs without a gate: Phi-2 (parallel branches, partial RoPE, an LM head bias) and
    # StarCoder2 (sliding window); Llama's mlp_bias.
    "phi2": make_tiny_phi2,
    "starcoder2": make_tiny_starcoder2,
    "llama_mlp_bias": lambda path, seed: make_tiny_llama(path, seed, mlp_bias=True),
    "nemotron_layernorm_1p_relu2": make_tiny_nemotron,
    "arcee_relu2": make_tiny_arcee,
    "apertus_xielu_qk_norm": make_tiny_apertus,
    "exaone4_output_norms_nope_global": make_tiny_exaone4,
    "seed_oss_attention_out_bias": make_tiny_seed_oss,
    "ernie4_5_biases_interleaved_rope": make_tiny_ernie4_5,
    "ernie4_5_moe_biased_softmax_routing": make_tiny_ernie4_5_moe,
    # GPT-OSS: attention sinks, sliding and full layers, biased experts with the clamped activation
    "gpt_oss_sinks_biased_experts": make_tiny_gpt_oss,
    "hunyuan_dense_qk_norm_after_rope": make_tiny_hunyuan_dense,
    # Hunyuan-A13B's MoE: softmax routing with a float32 router ("gate.wg"), a shared MLP beside the experts
    "hunyuan_moe_shared_mlp": make_tiny_hunyuan_moe,
    # MiniMax-M2: OLMo-style q/k norms over all heads, partial RoPE, sigmoid routing with a correction bias
    "minimax_m2_sigmoid_routing_full_width_qk_norm": make_tiny_minimax_m2,
    # Llama 4: chunked attention on RoPE layers (q/k L2-normed), NoPE layers with a query temperature, top-1 experts
    # whose weight scales their input, a shared expert, dense layers of another width; top-2 too.
    "llama4_chunks_nope_temperature_experts": make_tiny_llama4,
    "llama4_top2_experts": lambda path, seed: make_tiny_llama4(path, seed, num_experts_per_tok=2),
    # Vision-language checkpoints: their language model alone, for text (tied and untied LM heads).
    "gemma3_vision_language": make_tiny_gemma3_vision,
    "mistral3_vision_language": make_tiny_mistral3_vision,
    # Ministral 3: YaRN and Llama 4's query temperature on every layer; and as its releases ship, vision-language
    "ministral3_query_temperature": make_tiny_ministral3,
    "mistral3_ministral3_vision_language": lambda path, seed: make_tiny_mistral3_vision(path, seed, ministral3=True),
    "llama4_vision_language": make_tiny_llama4_vision,
    # Qwen VL: multimodal RoPE, which text positions reduce to plain RoPE (mrope sections, Qwen3-VL's interleaved)
    "qwen2_vl_vision_language": make_tiny_qwen2_vl_vision,
    "qwen2_5_vl_vision_language": make_tiny_qwen2_5_vl_vision,
    "qwen3_vl_vision_language": make_tiny_qwen3_vl_vision,
    "qwen3_vl_moe_vision_language": make_tiny_qwen3_vl_moe_vision,
    "qwen3_vl_moe_hub_layout_vision_language": lambda path, seed: make_tiny_qwen3_vl_moe_vision(path, seed,
                                                                                                hub_layout=True),
    # Quantised releases, dequantised at load (models/quantized_weights.py): FP8 blocks as DeepSeek-V3 and Qwen3 FP8
    # ship them (HF's own dequantisation is the reference); compressed-tensors FP8 and int8 per output channel and
    # packed int4 per group, GPTQ (act order; gptq_v2 8-bit experts) and AWQ (the reference: the weights dequantised
    # by the test's helper, as HF needs other packages for these formats).
    "llama_fp8_blocks": lambda path, seed: fp8_blocks(make_tiny_llama(path / "source", seed), path / "fp8", (16, 32)),
    "deepseek_v3_fp8_blocks": lambda path, seed: fp8_blocks(make_tiny_deepseek_v3(path / "source", seed),
                                                            path / "fp8", (2, 4)),
    "qwen3_moe_compressed_tensors_fp8_channels": lambda path, seed: compressed_tensors_channels(
        make_tiny_qwen3_moe(path / "source", seed), path / "quantised"),
    "qwen3_compressed_tensors_int8_channels": lambda path, seed: compressed_tensors_channels(
        make_tiny_qwen3(path / "source", seed), path / "quantised", torch.int8),
    "llama_gptq_4bit_act_order": lambda path, seed: gptq(make_tiny_llama(path / "source", seed), path / "gptq", 4, 16,
                                                         act_order=True),
    "qwen3_moe_gptq_v2_8bit": lambda path, seed: gptq(make_tiny_qwen3_moe(path / "source", seed), path / "gptq", 8, 16,
                                                      act_order=False, checkpoint_format="gptq_v2"),
    "qwen2_awq_4bit": lambda path, seed: awq(make_tiny_qwen2(path / "source", seed), path / "awq", 16),
    "llama_compressed_tensors_w4a16_groups": lambda path, seed: compressed_tensors_packed(
        make_tiny_llama(path / "source", seed), path / "quantised", 4, 16),
}


QUERY_LENS = [1, 8, 64]
"""max_batched_query_len of the reference backend: every sequence attended alone, mixed, every one batched. The
grouping is the backend's, not the model's: the three Llama-family originals run all three, the others one."""
CASES = [(name, length) for name in sorted(MAKERS)
         for length in (QUERY_LENS if name in ("llama", "qwen2", "qwen3") else [8])]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """Each family's tiny checkpoint and HF model, made on first use."""
    return {}


@pytest.fixture
def checkpoint_and_hf(request, checkpoints, tmp_path_factory) -> tuple[Path, object]:
    import transformers
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    name = request.node.callspec.params["family"]
    if name not in checkpoints:
        path = MAKERS[name](tmp_path_factory.mktemp(name), seed=1)
        auto = AutoModelForImageTextToText if name.endswith("vision_language") else AutoModelForCausalLM
        if name.startswith("mistral4"):  # a text model transformers does not register with AutoModelForCausalLM
            auto = transformers.Mistral4ForCausalLM
        hf_path = path / REFERENCE if (path / REFERENCE).is_dir() and not name.endswith("fp8_blocks") else path
        hf_model = auto.from_pretrained(hf_path, dtype=torch.float32).eval()
        if name.startswith("llama4_vision"):  # its own forward fails on text alone (transformers 5.x): the decoder
            hf_model = hf_model.language_model
        checkpoints[name] = (path, hf_model)
    return checkpoints[name]


def test_every_architecture_the_registry_serves_is_checked_against_hf(tmp_path):
    import json

    from executor_svc.models.registry import MODEL_CLASSES

    made = {json.loads((make(tmp_path / name, 0) / "config.json").read_text())["architectures"][0]
            for name, make in MAKERS.items()}
    assert made == set(MODEL_CLASSES)



class PagedSession:
    """Drives our model step by step over shuffled, non-contiguous blocks and checks every row against HF."""

    def __init__(self, checkpoint: Path, hf_model, max_batched_query_len: int) -> None:
        backend = TorchAttentionBackend(max_batched_query_len)
        self.model = load_model(checkpoint, torch.float32, torch.device("cpu"), backend)
        self.hf_model = hf_model
        config = self.model.config
        layout = kv_layout(config)
        self.cache = layout.cache(config.num_hidden_layers, NUM_BLOCKS, BLOCK_SIZE, torch.float32, "cpu")
        self.free_blocks = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(7)).tolist()
        self.tokens: dict[str, list[int]] = {}
        self.tables: dict[str, list[int]] = {}
        self.rng = torch.Generator().manual_seed(3)
        self.vocab_size = config.vocab_size

    def random_tokens(self, count: int) -> list[int]:
        return torch.randint(0, self.vocab_size, (count,), generator=self.rng).tolist()

    @torch.inference_mode()
    def step(self, work: list[tuple[str, list[int]]]) -> None:
        """One flattened forward of `work` (sequence name, new tokens); asserts logits equal HF's."""
        ids, positions, query_lens, seq_lens, tables = [], [], [], [], []
        for name, new_tokens in work:
            if name not in self.tokens:
                self.tokens[name] = []
                self.tables[name] = [self.free_blocks.pop() for _ in range(BLOCKS_PER_SEQ)]
            start = len(self.tokens[name])
            self.tokens[name].extend(new_tokens)
            ids.extend(new_tokens)
            positions.extend(range(start, start + len(new_tokens)))
            query_lens.append(len(new_tokens))
            seq_lens.append(len(self.tokens[name]))
            tables.append(self.tables[name])
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, "cpu")
        hidden = self.model(torch.tensor(ids), torch.tensor(positions), meta, self.cache)
        logits = self.model.compute_logits(hidden)
        assert logits.dtype == torch.float32
        for (name, new_tokens), rows in zip(work, logits.split(query_lens)):
            expected = self.hf_model(torch.tensor([self.tokens[name]])).logits[0, -len(new_tokens) :]
            torch.testing.assert_close(
                rows, expected, atol=ATOL, rtol=0, msg=lambda m, name=name: f"sequence {name}: {m}"
            )


@pytest.mark.parametrize(("family", "max_batched_query_len"), CASES)
def test_batched_prefill_then_decode_matches_hf(family, max_batched_query_len, checkpoint_and_hf):
    session = PagedSession(*checkpoint_and_hf, max_batched_query_len)
    lengths = {"a": 5, "b": 17, "c": 1, "d": 33}
    session.step([(name, session.random_tokens(n)) for name, n in lengths.items()])
    for _ in range(3):
        session.step([(name, session.random_tokens(1)) for name in lengths])


@pytest.mark.parametrize(("family", "max_batched_query_len"), CASES)
def test_chunked_prefill_mixed_with_decode_matches_hf(family, max_batched_query_len, checkpoint_and_hf):
    session = PagedSession(*checkpoint_and_hf, max_batched_query_len)
    session.step([("a", session.random_tokens(12)), ("b", session.random_tokens(9))])
    prompt = session.random_tokens(23)
    for start in range(0, len(prompt), 5):
        chunk = prompt[start : start + 5]
        session.step([("a", session.random_tokens(1)), ("chunked", chunk), ("b", session.random_tokens(1))])
    # Draft verification: several short queries per sequence, of different lengths, in one batch.
    verify = [("chunked", 3), ("a", 1), ("b", 4)]
    session.step([(name, session.random_tokens(n)) for name, n in verify])


def test_tied_embeddings_share_the_lm_head(tmp_path):
    from transformers import AutoModelForCausalLM

    path = make_tiny_llama(tmp_path, seed=2, tie_word_embeddings=True)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    session = PagedSession(path, hf, max_batched_query_len=8)
    assert session.model.lm_head_weight is session.model.embed_weight
    session.step([("a", session.random_tokens(6)), ("b", session.random_tokens(11))])
    session.step([("a", session.random_tokens(1)), ("b", session.random_tokens(1))])


def test_only_float32_cpu_weights_are_packed_and_the_loader_packs_every_projection(tmp_path):
    assert pack_for_cpu_matmul(torch.randn(8, 4, dtype=torch.bfloat16)) is None
    assert pack_for_cpu_matmul(torch.randn(8, 4, device="meta")) is None
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.model_loader import load_model

    path = make_tiny_llama(tmp_path, seed=3)
    packed = load_model(path, torch.float32, "cpu", TorchAttentionBackend(64))
    plain = load_model(path, torch.float32, "cpu", TorchAttentionBackend(64), pack_cpu_weights=False)
    if torch.backends.mkldnn.is_available():
        assert all(set(layer.attn.packed) == {"qkv_weight", "o_weight"} for layer in packed.layers)
        assert all(set(layer.mlp.packed) == {"gate_up_weight", "down_weight"} for layer in packed.layers)
        assert packed.packed_lm_head is not None
    assert all(not layer.attn.packed and not layer.mlp.packed for layer in plain.layers)
    assert plain.packed_lm_head is None
    assert not set(packed.state_dict()) ^ set(plain.state_dict())  # the packs are not weights to save or load


def test_default_rope_frequencies_cover_the_rotary_part_of_each_head():
    from types import SimpleNamespace

    config = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 100.0})
    inv_freq, attention_factor = rope_frequencies(config, 8)
    torch.testing.assert_close(inv_freq, 1.0 / 100.0 ** (torch.arange(0, 8, 2) / 8))
    assert attention_factor == 1.0


def test_longrope_is_served_up_to_its_original_context_and_others_to_max_positions():
    from transformers import LlamaConfig, Phi3Config

    phi3 = Phi3Config(hidden_size=64, num_attention_heads=4, max_position_embeddings=512, rope_parameters=LONGROPE,
                      original_max_position_embeddings=128)
    assert rope_context_limit(phi3)[0] == 128 and "longrope" in rope_context_limit(phi3)[1]
    _, attention_factor = rope_frequencies(phi3, 8)
    assert attention_factor > 1.0  # HF scales cos and sin by it; the tiny phi3_longrope checkpoint checks we do
    yarn = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=512, rope_parameters=YARN_ROPE)
    assert rope_context_limit(yarn)[0] == 512


def test_rope_parameters_read_both_config_generations():
    from types import SimpleNamespace

    legacy = SimpleNamespace(rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 2.0})
    assert rope_parameters(legacy) == {"rope_theta": 500000.0, "type": "linear", "factor": 2.0, "rope_type": "linear"}
    plain = SimpleNamespace(rope_theta=1e4, rope_scaling=None)
    assert rope_parameters(plain) == {"rope_theta": 1e4, "rope_type": "default"}
    current = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    assert rope_parameters(current) == {"rope_type": "default", "rope_theta": 100000.0}


def test_unsupported_rope_type_is_rejected():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="rope_type 'spiral'"):
        rope_frequencies(SimpleNamespace(rope_parameters={"rope_type": "spiral", "rope_theta": 10000.0}), 64)


def test_load_weights_rejects_unknown_misshapen_and_missing_tensors(tmp_path):
    from safetensors.torch import load_file

    path = make_tiny_llama(tmp_path, seed=0)
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    state = load_file(path / "model.safetensors")
    with pytest.raises(ValueError, match="unexpected tensor"):
        load_weights(model, [*state.items(), ("model.layers.0.mlp.extra.weight", torch.zeros(1))])
    bad_shape = {**state, "model.norm.weight": torch.ones(3)}
    with pytest.raises(ValueError, match="model.norm.weight"):
        load_weights(model, bad_shape.items())
    missing = {k: v for k, v in state.items() if k != "model.layers.1.self_attn.k_proj.weight"}
    with pytest.raises(ValueError, match="missing tensors model.layers.1.self_attn.k_proj.weight"):
        load_weights(model, missing.items())


@pytest.mark.parametrize(("field", "value"), [("use_bidirectional_attention", True),
                                              ("hidden_activation", "no_such_activation"),
                                              ("clip_qkv", 8.0), ("qk_layernorm", True)])
def test_config_features_the_decoder_does_not_implement_are_refused_by_name(field, value):
    from transformers import Gemma3TextConfig

    from executor_svc.models.variants import variant_for

    config = Gemma3TextConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                              head_dim=16, vocab_size=64)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field if field != "hidden_activation" else "hidden_act"):
        variant_for(config)
