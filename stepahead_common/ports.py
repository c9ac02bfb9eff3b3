"""Listening on the configured ports, with an error that names the flag when a port cannot be had."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc
    from prometheus_client import CollectorRegistry


class PortBindError(OSError):
    """A service could not listen where it was told to; the message names the setting and the address."""


def bind_grpc_port(server: grpc.Server | grpc.aio.Server, address: str,
                   credentials: grpc.ServerCredentials | None = None) -> int:
    """Add a listening port to ``server`` (TLS with ``credentials``); returns the bound port number."""
    try:
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # grpcio raises where older versions returned 0
        port = 0
    if port == 0:
        raise PortBindError(f"port: cannot listen on {address} (the port is in use, or the host is not an "
                            "address of this machine)")
    return port


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int:
    """Serve ``registry`` as Prometheus /metrics on host:port (0: any free port) from a daemon thread; returns
    the bound port."""
    from prometheus_client import start_http_server

    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise PortBindError(f"metrics_port: cannot listen on {host}:{port} ({error.strerror or error})") from None
    return server.server_port
