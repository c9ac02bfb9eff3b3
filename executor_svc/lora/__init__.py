"""LoRA adapters served over the base model: reading peft checkpoints, stacking them per projection, and applying
them to the rows of a batch that asked for one."""
