"""Helpers both services use (torch-free, so the scheduler stays torch-free); imports neither service."""
