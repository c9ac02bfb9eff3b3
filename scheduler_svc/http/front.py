"""uvicorn serving the HTTP app as a task of the scheduler's own event loop (no thread, no process).

The socket is bound before the task starts, so the port (``0``: any free one) is known at once
and a port in use fails start-up with a clear error. The scheduler keeps its signal handling:
uvicorn's own is switched off, and stop() asks the server to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from stepahead_common.ports import PortBindError

logger = logging.getLogger(__name__)


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to its host."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class _PathPrefix:
    """--root-path: a request whose path starts with ``prefix`` (a proxy that forwards it unchanged) gets ``prefix`` as
    its ASGI ``root_path``, so it is routed as the rest of its path; others (a proxy that strips it) as they are."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(self.prefix + "/"):
            scope = {**scope, "root_path": self.prefix}
        await self.app(scope, receive, send)


class HttpFront:
    """Serves ``app`` on host:port, plain or TLS, from the running event loop."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, tls_cert: str | None = None, tls_key: str | None = None,
        root_path: str = "",
    ) -> None:
        self.config = uvicorn.Config(
            _PathPrefix(app, root_path) if root_path else app,
            host=host,
            port=port,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            log_level=logging.WARNING,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=2,
        )
        self.host = host
        self.port = port
        self.scheme = "https" if tls_cert is not None else "http"
        self._server = _EmbeddedServer(self.config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        self.config.load()  # TLS files are read here: a bad certificate fails start-up, not the first request
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            sock = socket.create_server((self.host, self.port), family=family)
        except OSError as error:
            raise PortBindError(f"http_port: cannot listen on {self.host}:{self.port} ({error.strerror or error})"
                                ) from None
        self.port = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # start-up failed: raise its error
            raise RuntimeError("the HTTP server exited during start-up")
        return self.port

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:8000."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop accepting, let running responses end (up to the graceful timeout), then return."""
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
