"""Attention backends that read and write the paged KV cache, and the metadata they share."""
