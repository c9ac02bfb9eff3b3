"""`stepahead train-drafter`: self-distillation of an EAGLE-style draft head from the target model."""
