"""A process started by another stepahead process (its pid in STEPAHEAD_LAUNCHER_PID) stops once that launcher is gone,
even killed outright; one without the variable is never watched, and the variable is not passed on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from stepahead_common.parent_watch import LAUNCHER_PID_VARIABLE, launcher_pid, stop_when_launcher_exits

WATCHED_CHILD = textwrap.dedent("""
    import os, time
    from stepahead_common.parent_watch import stop_when_launcher_exits
    stop_when_launcher_exits(os.environ, interval_s=0.05, stop=lambda: os._exit(0))
    print("watching", flush=True)
    time.sleep(60)
""")

LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    env = dict(os.environ)
    if sys.argv[1] == "named":
        env[{variable!r}] = str(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], env=env, stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    print(child.pid, flush=True)
    time.sleep(60)
""").format(variable=LAUNCHER_PID_VARIABLE)


@pytest.mark.parametrize(("raw", "pid"), [("4242", 4242), (" 17 ", 17), ("", None), ("1", None), ("-5", None),
                                          ("abc", None)])
def test_the_launcher_is_read_from_the_environment(raw, pid):
    assert launcher_pid({LAUNCHER_PID_VARIABLE: raw}) == pid
    assert launcher_pid({}) is None


def grandchild_of_killed_launcher(named: bool) -> psutil.Process:
    """Start a launcher whose child watches it (``named``: the launcher set the variable), SIGKILL the launcher, and
    return the orphaned child."""
    env = {key: value for key, value in os.environ.items() if key != LAUNCHER_PID_VARIABLE}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, "named" if named else "anonymous", WATCHED_CHILD],
                                stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = psutil.Process(int(launcher.stdout.readline()))
    finally:
        launcher.kill()
        launcher.wait()
    return child


def test_a_child_stops_once_its_launcher_is_killed():
    child = grandchild_of_killed_launcher(named=True)
    child.wait(timeout=10)  # gone (psutil raises TimeoutExpired otherwise)


def test_a_child_without_a_launcher_is_left_running():
    child = grandchild_of_killed_launcher(named=False)
    try:
        with pytest.raises(psutil.TimeoutExpired):
            child.wait(timeout=1)
    finally:
        child.kill()


def test_the_variable_is_not_passed_on_to_this_processs_own_children():
    environ = {LAUNCHER_PID_VARIABLE: str(os.getppid()), "OTHER": "kept"}
    assert stop_when_launcher_exits(environ, stop=lambda: None) is not None
    assert environ == {"OTHER": "kept"}
