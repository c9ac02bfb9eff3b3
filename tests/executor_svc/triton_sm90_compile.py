"""Compiles the Triton attention kernels ahead of time for an H100 (sm_90), down to a cubin, with no GPU.

The interpreter runs the kernels' Python directly, so it accepts code the GPU compiler rejects (a global
that is not a tl.constexpr, a dot smaller than 16, mismatched loop-carried types). This compiles a few
representative specialisations with the wheel's own compiler and ptxas. Run it in a process where
TRITON_INTERPRET is unset (under the interpreter @triton.jit builds no compilable function).
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from executor_svc.attention import triton_kernels

TARGET = GPUTarget("cuda", 90, 32)
FLOAT_ARGS = {"qk_scale", "softcap"}


def compile_kernel(fn: object, pointers: dict[str, str], constants: dict[str, object]) -> None:
    """Compile ``fn`` with the given pointer element types and constexpr values; other arguments are i32."""
    arg_names: list[str] = fn.arg_names  # type: ignore[attr-defined]
    signature = {}
    for name in arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = "*" + pointers[name]
        else:
            signature[name] = "fp32" if name in FLOAT_ARGS else "i32"
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants), target=TARGET)
    assert "cubin" in compiled.asm, f"{fn}: no cubin"


def compile_write(dtype: str, num_kv_heads: int, head_dim: int) -> None:
    """The K/V write kernel."""
    pointers = {"k_ptr": dtype, "v_ptr": dtype, "kv_ptr": dtype, "slot_ptr": "i64"}
    constants = dict(
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=16,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        DIM_PAD=triton.next_power_of_2(head_dim),
    )
    compile_kernel(triton_kernels._write_kv_kernel, pointers, constants)


def compile_attention(
    dtype: str, head_dim: int, group: int, max_query_len: int, num_splits: int, softcap: bool = False
) -> None:
    """The attention kernel as ``paged_attention`` specialises it, and the combine kernel when it splits;
    ``softcap``: the variant of layers that cap their scores."""
    group_pad, block_q, block_m = triton_kernels._tile_shape(group, max_query_len)
    dim_pad = max(16, triton.next_power_of_2(head_dim))
    shared = dict(
        NUM_KV_HEADS=2, GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, DIM_PAD=dim_pad, BLOCK_Q=block_q,
        BLOCK_M=block_m, NUM_SPLITS=num_splits,
    )  # fmt: skip
    fp32 = dtype == "fp32"
    extra = dict(
        BLOCK_SIZE=16, BLOCK_N=64 if dim_pad <= 64 else 32, DOT_FP32=fp32, DOT_PRECISION="ieee" if fp32 else None,
        SOFTCAP=softcap,
    )
    partials = {"part_m_ptr": "fp32", "part_l_ptr": "fp32", "part_acc_ptr": "fp32"}
    metadata = {"qsl_ptr": "i64", "seq_lens_ptr": "i64"}
    pointers = {"q_ptr": dtype, "kv_ptr": dtype, "out_ptr": dtype, "block_tables_ptr": "i64", **partials, **metadata}
    compile_kernel(triton_kernels._attention_kernel, pointers, {**shared, **extra})
    if num_splits > 1:
        compile_kernel(triton_kernels._combine_kernel, {"out_ptr": dtype, **partials, **metadata}, shared)


def check_step_ints_are_not_specialised() -> None:
    """Ints that change from step to step are not specialised on (by default Triton compiles a variant for a
    value of 1 and for multiples of 16): the eager warm-up's kernels then serve every step."""
    for fn, names in ((triton_kernels._attention_kernel, {"num_tokens", "block_tables_stride", "window"}),
                      (triton_kernels._combine_kernel, {"num_tokens"})):
        unspecialised = {param.name for param in fn.params if param.do_not_specialize}  # type: ignore[attr-defined]
        assert names <= unspecialised, f"{fn}: {sorted(names - unspecialised)} specialised"


def main() -> None:
    """A bf16 decode with splits (and its combine), a bf16 prefill with a padded head_dim, a soft-capped bf16
    decode (fp32's ieee dots compile too, but several times slower: left out to keep the test short)."""
    check_step_ints_are_not_specialised()
    compile_write("bf16", 3, 64)
    compile_attention("bf16", head_dim=64, group=3, max_query_len=1, num_splits=4)
    compile_attention("bf16", head_dim=80, group=8, max_query_len=512, num_splits=1)
    compile_attention("bf16", head_dim=64, group=2, max_query_len=1, num_splits=1, softcap=True)
    print("compiled for sm_90")


if __name__ == "__main__":
    main()
