"""The OpenAI-compatible HTTP front: a FastAPI app on the scheduler's own event loop and Engine.

app.py assembles it; completions.py serves /v1/chat/completions and /v1/completions, translated_route.py
OpenAI's Responses API (/v1/responses) and Anthropic's Messages API (/v1/messages) through the same flow;
info_routes.py /v1/models, /health and /metrics; protocol.py, conversion.py, responses.py and
logprobs.py translate between OpenAI's shapes and the engine's (tools.py decides tool calling, whose parsers are
scheduler_svc/tool_calls/); streaming.py sends server-sent events; front.py runs uvicorn as a
task of the scheduler's loop.
"""
