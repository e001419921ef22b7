"""Screens and dialogs pushed over the main chat screen."""
