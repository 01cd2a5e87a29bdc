"""Tests of lamina.store: the object stores every table call stands on."""
