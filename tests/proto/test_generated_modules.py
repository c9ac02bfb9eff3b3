"""The committed generated modules must be exactly what proto/generate.sh produces now."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROTO_DIR = Path(__file__).parents[2] / "proto"


def test_generated_modules_are_fresh(tmp_path):
    work = tmp_path / "proto"
    shutil.copytree(PROTO_DIR, work, ignore=shutil.ignore_patterns("*_pb2*.py*", "__pycache__"))
    subprocess.run(["bash", str(work / "generate.sh")], check=True, capture_output=True)
    generated = sorted(p.name for p in (work / "stepahead_proto").glob("*_pb2*.py*"))
    committed = sorted(p.name for p in (PROTO_DIR / "stepahead_proto").glob("*_pb2*.py*"))
    assert generated == committed, "run `bash proto/generate.sh` and commit the result"
    for name in generated:
        fresh = (work / "stepahead_proto" / name).read_text()
        stored = (PROTO_DIR / "stepahead_proto" / name).read_text()
        assert fresh == stored, f"{name} is stale: run `bash proto/generate.sh` and commit the result"


def test_every_message_and_field_is_documented():
    for proto in (PROTO_DIR / "stepahead_proto").glob("*.proto"):
        lines = proto.read_text().splitlines()
        for index, line in enumerate(lines):
            stripped = line.strip()
            is_declaration = stripped.startswith(("message ", "enum ", "service ", "rpc ")) or (
                stripped.endswith(";")
                and "=" in stripped
                and not stripped.startswith(("option", "syntax", "package", "import"))
            )
            if is_declaration:
                previous = lines[index - 1].strip()
                assert previous.startswith("//"), (
                    f"{proto.name}:{index + 1} has no comment: {stripped}"
                )
