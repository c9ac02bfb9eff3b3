"""A reasoning model's thinking split from its answer (the scheduler's --reasoning-parser): splitters.py reads
``<think>`` blocks, harmony.py gpt-oss's channels, delta.py their shared parts; request_split.py decides whose output
is split."""
