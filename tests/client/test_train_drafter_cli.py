"""`stepahead train-drafter` rejects bad values with an error naming the flag, before any work."""

from __future__ import annotations

import pytest


def test_cli_rejects_bad_values_naming_the_flag(tmp_path, capsys):
    from client.cli import main

    for flag, value, name in (("--minutes", "-1", "minutes"), ("--num-threads", "0", "num_threads"),
                              ("--epochs", "0", "epochs"), ("--draft-vocab-size", "0", "draft_vocab_size")):
        with pytest.raises(SystemExit) as exit_info:
            main(["train-drafter", "--model", str(tmp_path), "--out", str(tmp_path / "out"), flag, value])
        assert exit_info.value.code == 2, name
        assert f"error: {name}:" in capsys.readouterr().err
