"""Tests of lamina.store.s3: the S3 store (conditional writes, TLS)."""
