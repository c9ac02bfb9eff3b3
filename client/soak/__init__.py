"""`stepahead soak`: a long randomized load against a stack, reporting leaks, hangs, memory growth and errors."""
