"""Drafters for speculative decoding: they propose tokens that the target then verifies."""
