"""llmchat tui."""
