"""Tests of lamina.catalog."""
