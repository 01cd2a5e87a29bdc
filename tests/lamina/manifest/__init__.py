"""Tests of lamina.manifest: versions, segments and the manifest codec."""
