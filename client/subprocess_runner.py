"""Running a helper command while showing its progress output and keeping its error text."""

from __future__ import annotations

import codecs
import io
import subprocess
import sys
from collections.abc import Sequence

_TAIL_CHARS = 4000
_TAIL_LINES = 8


def run_checked(command: Sequence[str], description: str) -> None:
    """Run `command`, forwarding its output (progress bars) to our stderr as it comes.

    Raises:
        RuntimeError: the command exited non-zero; the message names `description` and
            quotes the last lines the command wrote.
    """
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        tail = _forward_output(process)
    except BaseException:
        process.kill()  # e.g. KeyboardInterrupt: do not leave a half-done conversion running
        process.wait()
        raise
    returncode = process.wait()
    if returncode != 0:
        raise RuntimeError(
            f"{description} failed (exit code {returncode}): {_last_lines(tail)}\n"
            f"command: {' '.join(command)}"
        )


def _forward_output(process: subprocess.Popen[bytes]) -> str:
    """Copy the child's output to our stderr until it closes; return the last characters seen."""
    # stdout=PIPE with the default buffering: a BufferedReader, which has read1().
    stdout = process.stdout
    assert isinstance(stdout, io.BufferedReader)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    while chunk := stdout.read1(4096):
        text = decoder.decode(chunk)
        sys.stderr.write(text)
        sys.stderr.flush()
        tail = (tail + text)[-_TAIL_CHARS:]
    return tail + decoder.decode(b"", final=True)


def _last_lines(text: str) -> str:
    """The last few non-empty lines, each reduced to what a terminal shows after a '\\r'."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in text.split("\n")]
    return "\n".join([line for line in lines if line][-_TAIL_LINES:])
