"""Tests of lamina.testing: moto, the fault proxy, local Ray, the table factory and the pytest plugin."""
