"""The client commands' connection to a running server: the Client that their --server, TLS and API key flags (and
--wait-for-server and --retries, where a command has them) describe."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.sync_client import Client


def add_wait_for_server_argument(parser: argparse.ArgumentParser) -> None:
    """--wait-for-server SECONDS: wait for an unreachable server (starting, restarting) instead of failing at once;
    --retries N: send again a request the server ended UNAVAILABLE before answering (the SDK's ``retries``)."""
    from client.channels import MAX_RETRIES
    from client.cli_values import positive_float

    parser.add_argument("--wait-for-server", type=positive_float, default=None, metavar="SECONDS",
                        help="if the server cannot be reached (starting, restarting), wait up to this long for it "
                             "instead of failing at once")
    parser.add_argument("--retries", type=int, choices=range(MAX_RETRIES + 1), default=0, metavar="N",
                        help="send a request the server ended UNAVAILABLE before answering anything (a restarting "
                             f"scheduler) again, up to N times (0..{MAX_RETRIES}; default 0); never one that "
                             "streamed output")


def connected_client(args: argparse.Namespace) -> Client:
    """A Client of ``args.server`` with the command's TLS and API key; with --wait-for-server, once the server is
    reachable (UnavailableError after that many seconds), and every call waiting for it too."""
    from client.sync_client import Client

    waiting_s = getattr(args, "wait_for_server", None)
    client = Client(args.server, tls_ca=args.tls_ca, api_key=args.api_key, wait_for_server=waiting_s is not None,
                    retries=getattr(args, "retries", 0))
    if waiting_s is not None:
        try:
            client.wait_for_ready(waiting_s)
        except BaseException:
            client.close()
            raise
    return client
