"""Lamina test suite."""
