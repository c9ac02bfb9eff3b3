"""Model code for the Llama family over flattened token batches."""
