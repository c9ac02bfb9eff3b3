"""CUDA graphs for decode and verify steps: bucket shapes, static input buffers, capture and replay."""
