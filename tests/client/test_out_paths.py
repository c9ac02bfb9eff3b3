"""An output place that cannot be written is refused before a command measures anything, naming --out."""

from __future__ import annotations

import pytest

from client.out_paths import writable_dir, writable_file


def test_a_missing_directory_is_created(tmp_path):
    assert writable_dir("out", tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


def test_a_file_in_a_missing_directory_gets_its_directory(tmp_path):
    assert writable_file("out", tmp_path / "c" / "report.json") == tmp_path / "c" / "report.json"
    assert (tmp_path / "c").is_dir()


def test_a_directory_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"^out: cannot create {blocker / 'sub'} "):
        writable_dir("out", blocker / "sub")
    with pytest.raises(ValueError, match="^out: cannot create "):
        writable_file("out", blocker / "sub" / "report.json")


def test_a_directory_given_as_the_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is a directory, not a file"):
        writable_file("out", tmp_path)


@pytest.mark.parametrize("argv", [
    ["bench", "--no-hf", "--out", "{bad}"],
    ["profile", "--out", "{bad}/profile.json"],
    ["soak", "--minutes", "1", "--out", "{bad}/soak.json"],
    ["train-drafter", "--out", "{bad}"],
])
def test_commands_refuse_an_unwritable_out_before_starting(argv, tmp_path, capsys):
    from client.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = str(blocker / "sub")
    with pytest.raises(SystemExit) as exit_info:
        main([part.replace("{bad}", bad) for part in argv])
    assert exit_info.value.code == 2
    assert "error: out: cannot create" in capsys.readouterr().err
