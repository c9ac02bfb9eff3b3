"""The client commands' connection to a running server: the Client that their --server, TLS and API key flags (and
--wait-for-server, where a command has it) describe."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.sync_client import Client


def add_wait_for_server_argument(parser: argparse.ArgumentParser) -> None:
    """--wait-for-server SECONDS: wait for an unreachable server (starting, restarting) instead of failing at once."""
    from client.cli_values import positive_float

    parser.add_argument("--wait-for-server", type=positive_float, default=None, metavar="SECONDS",
                        help="if the server cannot be reached (starting, restarting), wait up to this long for it "
                             "instead of failing at once")


def connected_client(args: argparse.Namespace) -> Client:
    """A Client of ``args.server`` with the command's TLS and API key; with --wait-for-server, once the server is
    reachable (UnavailableError after that many seconds), and every call waiting for it too."""
    from client.sync_client import Client

    waiting_s = getattr(args, "wait_for_server", None)
    client = Client(args.server, tls_ca=args.tls_ca, api_key=args.api_key, wait_for_server=waiting_s is not None)
    if waiting_s is not None:
        try:
            client.wait_for_ready(waiting_s)
        except BaseException:
            client.close()
            raise
    return client
