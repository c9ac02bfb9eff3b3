"""Loaded by the stack's processes when this folder is on their PYTHONPATH (ab_switch_interval.py):
sets Python's thread switch interval from EXP_SWITCH_US (microseconds) when that is set."""
import os
import sys

_value = os.environ.get("EXP_SWITCH_US")
if _value:
    sys.setswitchinterval(int(_value) / 1e6)
