"""The scheduler service: requests, tokens and KV block bookkeeping, never a tensor."""
