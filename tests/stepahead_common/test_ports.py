"""Listening on a port that is taken fails with PortBindError naming the setting and the address."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from prometheus_client import CollectorRegistry, Counter

from stepahead_common.ports import PortBindError, bind_grpc_port, serve_metrics


def test_a_free_grpc_port_is_bound_and_returned():
    server = grpc.server(futures.ThreadPoolExecutor(1))
    try:
        assert bind_grpc_port(server, "127.0.0.1:0") > 0
    finally:
        server.stop(None)


def test_a_taken_grpc_port_names_the_setting(taken_port):
    server = grpc.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(PortBindError, match=f"^port: cannot listen on 127.0.0.1:{taken_port} "):
            bind_grpc_port(server, f"127.0.0.1:{taken_port}")
    finally:
        server.stop(None)


def test_an_address_of_another_host_is_refused_too():
    server = grpc.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(PortBindError, match="^port: cannot listen on 192.0.2.1:"):
            bind_grpc_port(server, "192.0.2.1:0")  # TEST-NET-1: never an address of this machine
    finally:
        server.stop(None)


def test_metrics_on_a_free_port_and_a_taken_one(taken_port):
    registry = CollectorRegistry()
    Counter("probe", "a counter", registry=registry).inc()
    assert serve_metrics(registry, "127.0.0.1", 0) > 0
    with pytest.raises(PortBindError, match=f"^metrics_port: cannot listen on 127.0.0.1:{taken_port} "):
        serve_metrics(registry, "127.0.0.1", taken_port)
