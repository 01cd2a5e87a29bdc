"""Tests of the lamina package (storage core)."""
