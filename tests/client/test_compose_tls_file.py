"""docker-compose.tls.yml, the TLS + mTLS + API key overlay: its variables are flags of the services it sets
them on, its files are the ones `stepahead make-certs` writes, and its health checks speak TLS (the
executor's with the scheduler's client certificate). Its setup commands parse."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
import yaml
from compose_file import REPO_ROOT

from client import cli
from client.env_defaults import flag_variables

TLS_COMPOSE = REPO_ROOT / "docker-compose.tls.yml"
MADE_BY_MAKE_CERTS = {"ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"}
COMMAND_OF = {"scheduler": "scheduler", "executor": "executor", "executor-gpu": "executor"}


@pytest.fixture(scope="module")
def overlay() -> dict:
    return yaml.safe_load(TLS_COMPOSE.read_text())


def flags_of(command: str) -> dict[str, str]:
    parser = cli._build_parser()
    subcommands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return flag_variables(subcommands.choices[command])


@pytest.mark.parametrize("service", sorted(COMMAND_OF))
def test_overlay_sets_only_flags_of_the_service_and_files_make_certs_writes(overlay, service):
    spec = overlay["services"][service]
    variables = spec["environment"]
    assert set(variables) <= set(flags_of(COMMAND_OF[service]))
    mount = {volume.split(":")[1]: volume.split(":")[0] for volume in spec["volumes"]}
    assert mount["/certs"] == "./certs"
    files = {value.removeprefix("/certs/") for value in variables.values() if value.startswith("/certs/")}
    assert files <= MADE_BY_MAKE_CERTS and files


def test_every_hop_is_secured(overlay):
    scheduler = overlay["services"]["scheduler"]["environment"]
    for name in ("STEPAHEAD_TLS_CERT", "STEPAHEAD_TLS_KEY", "STEPAHEAD_API_KEY", "STEPAHEAD_EXECUTOR_TLS_CA",
                 "STEPAHEAD_EXECUTOR_TLS_CERT", "STEPAHEAD_EXECUTOR_TLS_KEY"):
        assert scheduler[name], name
    assert scheduler["STEPAHEAD_API_KEY"].startswith("${STEPAHEAD_API_KEY:?")  # refuses to start without a key
    for service in ("executor", "executor-gpu"):
        assert overlay["services"][service]["environment"]["STEPAHEAD_TLS_CLIENT_CA"] == "/certs/ca.pem"


@pytest.mark.parametrize("service", sorted(COMMAND_OF))
def test_health_checks_speak_tls_and_parse(overlay, service):
    kind, program, *argv = overlay["services"][service]["healthcheck"]["test"]
    assert (kind, program, argv[0]) == ("CMD", "stepahead", "health")
    assert "--tls-ca" in argv
    if COMMAND_OF[service] == "executor":
        assert argv[argv.index("--tls-cert") + 1] == "/certs/client.pem"
    cli._build_parser().parse_args(argv)


def test_setup_commands_in_the_header_parse():
    header = [line.lstrip("# ").strip() for line in TLS_COMPOSE.read_text().splitlines() if line.startswith("#")]
    commands = [shlex.split(line, comments=True) for line in header if line.startswith("stepahead ")]
    assert any(words[1] == "make-certs" for words in commands) and any(words[1] == "generate" for words in commands)
    for words in commands:
        cli._build_parser().parse_args(words[1:])
    sans = re.findall(r"--san (\S+)", TLS_COMPOSE.read_text())
    assert {"scheduler", "executor", "executor-gpu"} <= set(sans)
