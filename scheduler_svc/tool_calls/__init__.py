"""Tool calls read from a model's free text, in its own syntax (the server's ``--tool-call-parser``).

common.py is what every parser offers (a finished output parsed, or a stream fed piece by piece) and parsers.py maps
the flag's names to the parsers: hermes.py, llama3_json.py, pythonic.py, mistral.py and harmony.py (gpt-oss), with
blocks.py and json_scan.py shared by some of them. request_parsing.py decides which gRPC requests' outputs are
parsed (GenerateRequest.parse_tool_calls) and output_calls.py parses them as they stream; the HTTP front's
tool_choice "auto" reads the same parsers (scheduler_svc/http/tools.py).
"""
