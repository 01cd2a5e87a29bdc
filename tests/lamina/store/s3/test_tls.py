"""S3 over TLS with a private CA: reads (signed and sent directly) and writes (boto3) trust the same CA bundle,
from ``storage_options`` or ``AWS_CA_BUNDLE``, and skip the check only when ``verify=false`` is asked for.

The endpoint is a moto server on 127.0.0.1 behind TLS, its certificate signed by a CA made for the test.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import InvalidConfig, StorageError
from lamina.testing import moto_s3
from lamina.testing.tls import TestCA

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
ROWS = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory):
    return TestCA.create(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def tls_s3(test_ca, monkeypatch):
    """A bucket on a moto server speaking HTTPS with a certificate the test CA signs; no CA variable set."""
    for name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/lamina-test-aws-config")
    with moto_s3(tls=test_ca) as s3:
        assert s3.endpoint.startswith("https://127.0.0.1:")
        yield s3


def _write_then_read(uri: str, opts: dict) -> pa.Table:
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(ROWS)
    reopened = lamina.open_table(uri, storage_options=opts)  # a new store: manifest and data read directly
    assert reopened.store.direct_reads
    return reopened.to_arrow()


def test_reads_and_writes_trust_the_ca_bundle_in_aws_ca_bundle(tls_s3, test_ca, monkeypatch):
    monkeypatch.setenv("AWS_CA_BUNDLE", test_ca.ca_file)
    assert _write_then_read(tls_s3.uri("env"), tls_s3.storage_options).equals(ROWS)


def test_reads_and_writes_trust_the_ca_bundle_in_storage_options(tls_s3, test_ca):
    opts = {**tls_s3.storage_options, "ca_bundle": test_ca.ca_file}
    assert _write_then_read(tls_s3.uri("option"), opts).equals(ROWS)


def test_reads_and_writes_trust_the_ca_bundle_of_the_aws_config_file(tls_s3, test_ca, tmp_path, monkeypatch):
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\nca_bundle = {test_ca.ca_file}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert _write_then_read(tls_s3.uri("config"), tls_s3.storage_options).equals(ROWS)


def test_the_storage_option_comes_before_the_variable(tls_s3, test_ca, tmp_path, monkeypatch):
    other = TestCA.create(tmp_path / "other")  # a CA that did not sign the endpoint's certificate
    monkeypatch.setenv("AWS_CA_BUNDLE", other.ca_file)
    assert _write_then_read(tls_s3.uri("first"), {**tls_s3.storage_options, "ca_bundle": test_ca.ca_file}).equals(ROWS)
    with pytest.raises(StorageError, match=f"checked against {other.ca_file}, from AWS_CA_BUNDLE"):
        lamina.open_table(tls_s3.uri("first"), storage_options=tls_s3.storage_options)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verify_false_skips_the_check_for_reads_and_writes_only_when_asked(tls_s3):
    opts = {**tls_s3.storage_options, "verify": "false"}
    assert _write_then_read(tls_s3.uri("unverified"), opts).equals(ROWS)


def test_without_the_ca_writes_and_reads_both_refuse_the_endpoint_and_say_what_to_do(tls_s3, test_ca):
    endpoint = tls_s3.endpoint
    # Write: boto3's client.
    with pytest.raises(StorageError) as e:
        lamina.create_table(tls_s3.uri("untrusted"), SCHEMA, storage_options=tls_s3.storage_options)
    assert endpoint in str(e.value) and "certificate" in str(e.value) and "ca_bundle" in str(e.value)
    assert "AWS_CA_BUNDLE" in str(e.value)
    # Read: a table written with the CA, read without it, through the direct path.
    uri = tls_s3.uri("written-with-ca")
    lamina.create_table(uri, SCHEMA, storage_options={**tls_s3.storage_options, "ca_bundle": test_ca.ca_file}).append(ROWS)
    with pytest.raises(StorageError) as e:
        lamina.open_table(uri, storage_options=tls_s3.storage_options)
    assert endpoint in str(e.value) and "certificate" in str(e.value) and "ca_bundle" in str(e.value)


def test_a_ca_bundle_that_is_not_a_file_is_refused_naming_it(tls_s3, tmp_path, monkeypatch):
    missing = str(tmp_path / "no-such-ca.pem")
    with pytest.raises(InvalidConfig, match="no-such-ca.pem"):
        lamina.open_table(tls_s3.uri("x"), storage_options={**tls_s3.storage_options, "ca_bundle": missing})
    monkeypatch.setenv("AWS_CA_BUNDLE", missing)
    with pytest.raises(InvalidConfig, match="AWS_CA_BUNDLE"):
        lamina.open_table(tls_s3.uri("x"), storage_options=tls_s3.storage_options)
