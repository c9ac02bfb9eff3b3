"""Tensor parallelism: the rank group, sharded model layers' collectives, and step broadcast between ranks."""
