"""`stepahead lora list|load|unload`: the LoRA adapters a running server serves, and changing them while it serves
(load and unload need a scheduler started with --allow-runtime-lora-updating)."""

from __future__ import annotations

import argparse
from typing import Any

from scheduler_svc.config import DEFAULT_PORT


def add_lora_parser(commands: Any, add_tls_arguments: Any) -> None:
    """Register `stepahead lora` and its three actions (``add_tls_arguments``: the client TLS / API key flags)."""
    lora = commands.add_parser("lora", help="list, load or unload the LoRA adapters of a running server")
    actions = lora.add_subparsers(dest="lora_action", required=True)
    listing = actions.add_parser("list", help="the served adapters and the slots per executor group")
    load = actions.add_parser("load", help="serve the peft adapter in PATH as NAME (a request's model)")
    load.add_argument("name", help="the name requests use as their model")
    load.add_argument("path", help="the adapter's directory, as the executors see it")
    unload = actions.add_parser("unload", help="stop serving adapter NAME (refused while a request uses it)")
    unload.add_argument("name")
    for action in (listing, load, unload):
        action.add_argument("--server", default=f"127.0.0.1:{DEFAULT_PORT}")
        add_tls_arguments(action)


def run_lora(args: argparse.Namespace) -> None:
    """Print the served adapters after the action (one per line; "(none)" when there is none)."""
    from client.cli_connection import connected_client

    with connected_client(args) as client:
        if args.lora_action == "load":
            names = client.load_lora_adapter(args.name, args.path)
        elif args.lora_action == "unload":
            names = client.unload_lora_adapter(args.name)
        else:
            info = client.model_info()
            names = info.lora_adapters
            print(f"{len(names)} of {info.max_loras} adapter slots in use")
    print("\n".join(names) if names else "(none)")
