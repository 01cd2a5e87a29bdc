"""Tests of lamina.index: building, querying and searching indices."""
