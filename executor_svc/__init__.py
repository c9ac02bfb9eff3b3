"""Executor service: model runner, sampler, drafters and KV cache on the accelerator."""
