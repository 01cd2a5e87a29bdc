"""S3 as a Lamina store, split by seam: ``credentials`` (who signs, botocore's signer), ``transport`` (TLS,
proxies, pools, the client, what a failure is), ``conditional`` (put-if-absent and multipart uploads under a
writer token) and ``store`` (``S3Store``: the store's operations as retried, scheduled requests)."""

from lamina.store.s3.conditional import TOKEN_KEY
from lamina.store.s3.credentials import StaticCredentials
from lamina.store.s3.store import S3_OPTIONS, S3Store, parse_s3_uri
from lamina.store.s3.transport import TLS, tls_settings

__all__ = ["S3Store", "S3_OPTIONS", "TLS", "TOKEN_KEY", "StaticCredentials", "parse_s3_uri", "tls_settings"]
