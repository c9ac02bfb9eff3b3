"""TLS files and gRPC credentials, shared by both services and the client (no torch, no SDK objects).

Config dataclasses validate their certificate and key paths with :func:`check_pem_file` and
:func:`check_pair`, so a missing or unreadable file is a ValueError naming the field at start-up,
not a handshake failure later. The credential builders read the files when a server or channel is
made.
"""

from __future__ import annotations

from pathlib import Path

import grpc

PEM_MARKER = b"-----BEGIN "


def check_pem_file(path: str | None, field: str) -> None:
    """Raise ValueError naming ``field`` unless ``path`` is None or a readable PEM file."""
    if path is None:
        return
    if not path:
        raise ValueError(f"{field}: must be a file path, got an empty string")
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"{field}: cannot read {path!r} ({error.strerror or error})") from None
    if PEM_MARKER not in content:
        raise ValueError(f"{field}: {path!r} is not a PEM file (no '-----BEGIN' line)")


def check_pair(cert: str | None, key: str | None, cert_field: str, key_field: str) -> None:
    """A certificate and its private key come together: raise ValueError naming the missing one."""
    if cert is not None and key is None:
        raise ValueError(f"{key_field}: required with {cert_field} (the certificate's private key)")
    if key is not None and cert is None:
        raise ValueError(f"{cert_field}: required with {key_field} (the key's certificate)")
    check_pem_file(cert, cert_field)
    check_pem_file(key, key_field)


def read_optional(path: str | None) -> bytes | None:
    """The file's bytes, or None when no path is given."""
    return None if path is None else Path(path).read_bytes()


def server_credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """Server TLS from PEM files; with ``client_ca``, only clients with a certificate it signed get in."""
    pair = (Path(key).read_bytes(), Path(cert).read_bytes())
    return grpc.ssl_server_credentials(
        [pair], root_certificates=read_optional(client_ca), require_client_auth=client_ca is not None
    )


def channel_credentials(
    ca: str | None = None, cert: str | None = None, key: str | None = None
) -> grpc.ChannelCredentials:
    """Client TLS: trust ``ca`` (None: the system's roots); present ``cert``/``key`` when given (mutual TLS)."""
    return grpc.ssl_channel_credentials(
        root_certificates=read_optional(ca), private_key=read_optional(key), certificate_chain=read_optional(cert)
    )
