"""Building blocks of the engine's models: linear (LoRA hook), RMS norm, rotary embedding, fused ops."""
