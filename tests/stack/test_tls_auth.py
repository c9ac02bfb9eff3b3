"""TLS, mutual TLS and API keys through real processes (tiny checkpoint).

One stack with every hop secured: the public gRPC API and the HTTP front over TLS with API keys (a
key file with two keys), the scheduler reaching its executor over mutual TLS. The right key and CA
succeed (SDK sync and async, CLI, openai); a missing or wrong key is UNAUTHENTICATED / 401; health
stays open; a plaintext client, a client that does not trust the CA, and clients of the executor
without the scheduler's certificate (none, or one from another CA) are refused. Last, `stepahead
serve` with TLS + mTLS + a key runs end to end, generating through the CLI and the SDK.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess

import httpx
import openai
import pytest
from cpu_share import executor_threads

from client import AsyncClient, Client, UnauthenticatedError, UnavailableError
from client.certs import make_certs
from client.health_check import health_status
from client.launcher import ServiceProcess
from client.stack import LocalStack

pytestmark = pytest.mark.stack

KEYS = ("key-alpha", "key-beta")
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory):
    """A second CA and its certificates: trusted by nobody here."""
    return make_certs(tmp_path_factory.mktemp("other-certs"))


def clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith(("STEPAHEAD_", "OTEL_"))}


@pytest.fixture(scope="module")
def secure_stack(request, tiny_model_dir, certs, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text("# accepted keys\n" + "\n".join(KEYS) + "\n")
    executor_flags = ["--num-threads", executor_threads(), "--max-model-len", "256", "--tls-cert", str(certs.server),
                      "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca)]
    scheduler_flags = ["--http-port", "0", "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key),
                       "--api-key-file", str(key_file), "--executor-tls-ca", str(certs.ca),
                       "--executor-tls-cert", str(certs.client), "--executor-tls-key", str(certs.client_key)]
    stack = LocalStack(str(tiny_model_dir), executor_flags, scheduler_flags, env=clean_env(), tls_ca=str(certs.ca))
    failed_before = request.session.testsfailed
    try:
        stack.start(timeout_s=300)
        yield stack
    finally:
        if request.session.testsfailed > failed_before:
            print(stack.logs())
        stack.stop()


def test_the_right_key_and_ca_succeed_sync_and_async(secure_stack, certs):
    for key in KEYS:
        with Client(secure_stack.address, tls_ca=str(certs.ca), api_key=key) as client:
            result = client.generate(messages=MESSAGES, max_tokens=4, ignore_eos=True, temperature=0.0)
            assert len(result.token_ids) == 4

    async def run():
        async with AsyncClient(secure_stack.address, tls_ca=str(certs.ca), api_key=KEYS[0]) as client:
            return await client.generate(prompt="hello", max_tokens=3, ignore_eos=True)

    assert len(asyncio.run(run()).token_ids) == 3


def test_the_key_can_come_from_the_environment(secure_stack, certs, monkeypatch):
    monkeypatch.setenv("STEPAHEAD_API_KEY", KEYS[1])
    with Client(secure_stack.address, tls_ca=str(certs.ca)) as client:
        assert client.model_info().model


@pytest.mark.parametrize("key", [None, "key-gamma", "key-alpha-and-more"])
def test_missing_or_wrong_key_is_unauthenticated(secure_stack, certs, key, monkeypatch):
    monkeypatch.delenv("STEPAHEAD_API_KEY", raising=False)
    with Client(secure_stack.address, tls_ca=str(certs.ca), api_key=key) as client:
        with pytest.raises(UnauthenticatedError) as caught:
            client.generate(prompt="hi", max_tokens=2)
        assert "key-alpha" not in str(caught.value)
        with pytest.raises(UnauthenticatedError):
            client.model_info()
        with pytest.raises(UnauthenticatedError):
            client.tokenize("hi")
    status = health_status(secure_stack.address, "stepahead.v1.Generation", tls_ca=str(certs.ca))
    assert status == "SERVING"  # health needs no key


def test_plaintext_and_untrusting_grpc_clients_are_refused(secure_stack, other_certs):
    with Client(secure_stack.address, api_key=KEYS[0], timeout=10) as plaintext:
        with pytest.raises(UnavailableError):
            plaintext.model_info()
    with Client(secure_stack.address, tls_ca=str(other_certs.ca), api_key=KEYS[0], timeout=10) as untrusting:
        with pytest.raises(UnavailableError):
            untrusting.model_info()


def test_http_front_tls_and_keys(secure_stack, certs):
    url = secure_stack.http_url
    assert url and url.startswith("https://127.0.0.1:")
    trusted = ssl.create_default_context(cafile=str(certs.ca))

    def client(key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0,
                             http_client=openai.DefaultHttpx2Client(verify=trusted))

    with client(KEYS[1]) as good:
        model = good.models.list().data[0].id
        reply = good.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3)
        assert reply.usage.completion_tokens >= 1
    with client("key-gamma") as wrong:
        with pytest.raises(openai.AuthenticationError) as caught:
            wrong.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3)
        assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    with httpx.Client(base_url=url, verify=trusted) as http:
        missing = http.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES})
        assert missing.status_code == 401 and set(missing.json()["error"]) == {"message", "type", "param", "code"}
        assert http.get("/health").status_code == 200  # open
    with openai.OpenAI(base_url=f"{url.replace('https', 'http')}/v1", api_key=KEYS[0], max_retries=0) as plain:
        with pytest.raises(openai.APIConnectionError):
            plain.models.list()
    with openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS[0], max_retries=0) as untrusting:  # system roots only
        with pytest.raises(openai.APIConnectionError):
            untrusting.models.list()


def test_the_executor_admits_only_the_schedulers_certificate(secure_stack, certs, other_certs):
    address, service = secure_stack.executor_address, "stepahead.v1.Executor"
    assert health_status(address, service, tls_ca=str(certs.ca), tls_cert=str(certs.client),
                         tls_key=str(certs.client_key)) == "SERVING"
    assert health_status(address, service) == "UNAVAILABLE"  # plaintext
    assert health_status(address, service, tls_ca=str(certs.ca)) == "UNAVAILABLE"  # TLS, no client certificate
    assert health_status(address, service, tls_ca=str(certs.ca), tls_cert=str(other_certs.client),
                         tls_key=str(other_certs.client_key)) == "UNAVAILABLE"  # a certificate of another CA


def test_cli_generate_and_health_with_tls_and_key(secure_stack, certs):
    def cli(*argv: str, **env: str):
        return subprocess.run(ServiceProcess.cli_argv(*argv), capture_output=True, text=True, timeout=120,
                              env={**clean_env(), **env})

    done = cli("generate", "hello", "--server", secure_stack.address, "--tls-ca", str(certs.ca), "--api-key", KEYS[0],
               "--max-tokens", "4")
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    done = cli("generate", "hello", "--server", secure_stack.address, "--tls-ca", str(certs.ca), "--max-tokens", "4",
               STEPAHEAD_API_KEY=KEYS[1])
    assert done.returncode == 0, done.stderr
    done = cli("generate", "hello", "--server", secure_stack.address, "--tls-ca", str(certs.ca), "--max-tokens", "4")
    assert done.returncode == 2 and "UNAUTHENTICATED" in done.stderr
    done = cli("health", secure_stack.executor_address, "--service", "stepahead.v1.Executor", "--tls-ca",
               str(certs.ca), "--tls-cert", str(certs.client), "--tls-key", str(certs.client_key))
    assert done.returncode == 0 and done.stdout.strip() == "SERVING"


def test_serve_with_tls_mtls_and_a_key_runs_end_to_end(tiny_model_dir, certs):
    serve = ServiceProcess("serve", ServiceProcess.cli_argv(
        "serve", "--model", str(tiny_model_dir), "--port", "0", "--http-port", "0", "--num-threads", executor_threads(),
        "--max-model-len", "256", "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key),
        "--tls-client-ca", str(certs.ca), "--executor-tls-ca", str(certs.ca), "--executor-tls-cert",
        str(certs.client), "--executor-tls-key", str(certs.client_key)), {**clean_env(), "STEPAHEAD_API_KEY": "k-1"})
    try:
        serving = serve.start(r"stepahead serving \S+ on (\S+) and https://", timeout_s=300)
        assert "k-1" not in serve.log()
        done = subprocess.run(ServiceProcess.cli_argv("generate", "hello", "--server", serving, "--tls-ca",
                                                      str(certs.ca), "--max-tokens", "4", "--json"),
                              capture_output=True, text=True, timeout=120,
                              env={**clean_env(), "STEPAHEAD_API_KEY": "k-1"})
        assert done.returncode == 0 and '"finish_reason"' in done.stdout, done.stderr
        with Client(serving, tls_ca=str(certs.ca), api_key="k-1") as client:
            assert len(client.generate(prompt="hi", max_tokens=3, ignore_eos=True).token_ids) == 3
        with Client(serving, tls_ca=str(certs.ca), api_key="wrong") as client:
            with pytest.raises(UnauthenticatedError):
                client.generate(prompt="hi", max_tokens=3)
    finally:
        serve.stop()
