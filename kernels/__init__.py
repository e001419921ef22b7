"""llmchat kernels."""
