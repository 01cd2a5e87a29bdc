"""A private certificate authority made at test time, and the server certificate it signs, for TLS endpoints on loopback.

    ca = TestCA.create(tmp_path)                  # ca.ca_file: the PEM clients trust (AWS_CA_BUNDLE)
    with moto_s3(ssl_context=ca.server_context()) as s3:   # https://127.0.0.1:<port>
        ...

Nothing is trusted by default: a client that is not given ``ca_file`` refuses the endpoint, as it
would a real one signed by a company's own CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestCA:
    """A CA certificate (``ca_file``) and a certificate it signs for 127.0.0.1 and localhost (``cert_file``,
    ``key_file``), as PEM files in one directory."""

    __test__ = False  # a helper, not a pytest test class

    ca_file: str
    cert_file: str
    key_file: str

    @classmethod
    def create(cls, directory: str | Path, name: str = "Lamina test CA") -> TestCA:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.timezone.utc)
        valid = (now - dt.timedelta(days=1), now + dt.timedelta(days=30))

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )

        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )

        pem = serialization.Encoding.PEM
        ca_file, cert_file, key_file = d / "ca.pem", d / "server.pem", d / "server.key"
        ca_file.write_bytes(ca_cert.public_bytes(pem))
        cert_file.write_bytes(cert.public_bytes(pem))
        key_file.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return cls(str(ca_file), str(cert_file), str(key_file))

    def server_context(self) -> ssl.SSLContext:
        """A server-side TLS context presenting the signed certificate."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


__all__ = ["TestCA"]
