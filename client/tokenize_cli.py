"""`stepahead tokenize`: a prompt's token ids as a running server's model reads them (chat template applied)."""

from __future__ import annotations

import argparse
import json

from client.generate_cli import add_prompt_arguments, prompt_kwargs


def add_tokenize_arguments(parser: argparse.ArgumentParser) -> None:
    """The prompt, the server and the output format of `stepahead tokenize`."""
    add_prompt_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="print {count, max_model_len, token_ids, texts} instead of the count and the ids")


def run_tokenize(args: argparse.Namespace) -> None:
    """Print the prompt's token count against the model's limit and its ids (or everything as JSON)."""
    from client.cli_connection import connected_client

    with connected_client(args) as client:
        result = client.tokenize(**prompt_kwargs(args))
        if args.json:
            texts = [client.detokenize([token], skip_special_tokens=False) for token in result.token_ids]
            print(json.dumps({"count": result.count, "max_model_len": result.max_model_len,
                              "token_ids": list(result.token_ids), "texts": texts}, indent=2))
            return
    print(f"{result.count} tokens (max_model_len {result.max_model_len})")
    print(" ".join(str(token) for token in result.token_ids))
