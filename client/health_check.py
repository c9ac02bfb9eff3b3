"""One grpc.health.v1 Check, for `stepahead health` (container health checks) and scripts."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stepahead_common.tls import channel_credentials, check_pair, check_pem_file

SERVING = "SERVING"


def health_status(
    address: str,
    service: str = "",
    timeout_s: float = 3.0,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> str:
    """The status name the service at ``address`` reports for ``service``.

    ``service`` "" is the process's liveness; a service's full name (stepahead.v1.Generation,
    stepahead.v1.Executor) its readiness. Returns SERVING, NOT_SERVING, ... or, when the call
    itself fails, the gRPC code's name (UNAVAILABLE, DEADLINE_EXCEEDED, NOT_FOUND for an
    unknown service). With ``tls_ca`` the call goes over TLS trusting that CA, presenting
    ``tls_cert``/``tls_key`` when given (an executor with mutual TLS asks for a client certificate).
    A TLS file that cannot be read is a ValueError naming its option.
    """
    if tls_ca is None and tls_cert is None:
        channel = grpc.insecure_channel(address)
    else:
        check_pem_file(tls_ca, "tls_ca")
        check_pair(tls_cert, tls_key, "tls_cert", "tls_key")
        channel = grpc.secure_channel(address, channel_credentials(tls_ca, tls_cert, tls_key))
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as error:
            return error.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
