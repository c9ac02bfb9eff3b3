"""`stepahead bench`: load generation against the stack, with HF and bare-forward baselines in one run."""
