"""llmchat engine."""
