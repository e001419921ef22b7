"""Widgets of the main screen, one area per module."""
