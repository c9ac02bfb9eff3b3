"""Loaded by the stack's processes when this folder is on their PYTHONPATH (ab_uvloop.py): makes
uvloop the asyncio event loop (the scheduler's; the executor runs no event loop) when EXP_UVLOOP
is set. Needs `pip install uvloop`."""
import os

if os.environ.get("EXP_UVLOOP"):
    import asyncio

    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
