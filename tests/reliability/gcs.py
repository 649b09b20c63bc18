"""gs:// on loopback, for real: a GCS emulator, and a relay that lets TensorFlow's own GCS client
reach it.

    with GCS(tmp_path) as gcs:                    # emulator + relay on 127.0.0.1, bucket "bertbeam"
        subprocess.run([...], env=gcs.env())      # Beam, TF and our code on gs://bertbeam/...

- The emulator is `gcp-storage-emulator` (PyPI, pure Python), in memory. It serves the JSON API,
  the upload and download endpoints and the batch endpoint that Beam's file sinks use at
  FinalizeWrite; the Go `fake-gcs-server` lacks the batch endpoint, so Beam fails there. It
  crashes on a zero-byte media upload, which is how TF writes a directory marker: the relay sends
  those as the equivalent multipart upload.
- Python clients (Beam's GcsIO, google-cloud-storage) honour STORAGE_EMULATOR_HOST.
- TensorFlow's GCS filesystem has no endpoint setting: it always calls https://www.googleapis.com
  and https://storage.googleapis.com. Its curl honours HTTPS_PROXY and CURL_CA_BUNDLE, so the
  relay is that proxy: it accepts CONNECT for those two hosts only, ends TLS with a certificate
  for them from a throwaway CA made here, and forwards the plain HTTP to the emulator.
  GOOGLE_AUTH_TOKEN_FOR_TESTING and NO_GCE_CHECK skip TF's auth; its GCS_* retry settings are
  read once, at import, so they go into the environment of the processes started with `env()`.
Nothing here changes production code: it runs TF's and Beam's native gs:// paths unchanged.
"""

from __future__ import annotations

import datetime
import http.client
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import distributed

BUCKET = "bertbeam"
KEY_USAGES = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
              "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")  # fmt: skip
TF_HOSTS = ("www.googleapis.com", "storage.googleapis.com")  # hard-coded in TF's GCS filesystem


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate for TF's two GCS hosts signed by it: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bertbeam test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(**{**dict.fromkeys(KEY_USAGES, False), "key_cert_sign": True,
                                        "crl_sign": True, "digital_signature": True}), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TF_HOSTS[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in TF_HOSTS]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
    )  # fmt: skip
    return paths


class _Relay(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, emulator_port: int, tls: ssl.SSLContext):
        super().__init__(("127.0.0.1", 0), _RelayHandler)
        self.emulator_port, self.tls = emulator_port, tls
        self.requests = 0  # forwarded to the emulator: proof TF's traffic went through here


class _RelayHandler(http.server.BaseHTTPRequestHandler):
    """An HTTPS proxy for TF's two GCS hosts only. CONNECT: TLS with our certificate, then the
    requests inside the tunnel are handled here too. Each request goes to the emulator as plain
    HTTP with its Host header kept. (The emulator's resumable-upload Location is http://host/...,
    so curl also sends plain proxy requests in absolute form; those are forwarded the same way.)"""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: the emulator logs every request
        pass

    def do_CONNECT(self):
        if self.path.rsplit(":", 1)[0] not in TF_HOSTS:
            self.send_error(403, "this relay serves TF's GCS hosts only")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        tunnel = self.server.tls.wrap_socket(self.connection, server_side=True)
        _RelayHandler(tunnel, self.client_address, self.server)  # serves the tunnel until it closes
        self.close_connection = True

    def _forward(self):
        url = urllib.parse.urlsplit(self.path)
        if url.netloc and url.hostname not in TF_HOSTS:
            self.send_error(403, "this relay serves TF's GCS hosts only")
            return
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        query = urllib.parse.parse_qs(url.query)
        if self.command == "POST" and query.get("uploadType") == ["media"] and not body:
            # TF writes directory markers ("a/b/", zero bytes) as media uploads, and the emulator
            # crashes on an empty media body; the same object as a multipart upload works.
            query["uploadType"] = ["multipart"]
            body, headers["Content-Type"] = _empty_multipart(query["name"][0])
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.emulator_port, timeout=120)
        target = (url.path or "/") + (f"?{urllib.parse.urlencode(query, doseq=True)}" if query else "")
        upstream.request(self.command, target, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        self.server.requests += 1
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else (b"" if self.command in ("PUT", "POST") else None)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _forward


def _empty_multipart(name: str) -> tuple[bytes, str]:
    """A multipart upload body for a zero-byte object: (body, content type)."""
    boundary = "bertbeam-empty-object"
    body = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
        f"{json.dumps({'name': name})}\r\n"
        f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n\r\n"
        f"--{boundary}--\r\n"
    )
    return body.encode(), f"multipart/related; boundary={boundary}"


HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
              "proxy-authorization", "trailer"}  # fmt: skip


class GCS:
    """The emulator (a child process) and the relay (a thread), both on 127.0.0.1."""

    def __init__(self, folder: Path, bucket: str = BUCKET):
        self.folder, self.bucket = Path(folder), bucket

    def __enter__(self) -> GCS:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
             "--port", str(self.port), "--in-memory"],
            stdout=subprocess.DEVNULL, stderr=open(self.folder / "emulator.log", "wb"),
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{self.url}/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"GCS emulator did not start; see {self.folder / 'emulator.log'}")
        self.create_bucket(self.bucket)
        self.ca, cert, key = make_ca(self.folder)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self.relay = _Relay(self.port, tls)
        threading.Thread(target=self.relay.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.relay.shutdown()
        self.relay.server_close()
        self.process.kill()
        self.process.wait()

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test", data=body, headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=10).read()

    def wipe(self) -> None:
        urllib.request.urlopen(f"{self.url}/wipe", timeout=10).read()
        self.create_bucket(self.bucket)

    def env(self) -> dict[str, str]:
        """The environment for a process that uses gs:// here (TF's settings: before it imports)."""
        relay = f"http://127.0.0.1:{self.relay.server_address[1]}"
        env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
        return {
            **env,
            "STORAGE_EMULATOR_HOST": self.url,  # Beam, google-cloud-storage (direct, no relay)
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "HTTPS_PROXY": relay,  # TF's curl
            "https_proxy": relay,
            "HTTP_PROXY": relay,  # the resumable-upload Location the emulator hands out is http://
            "http_proxy": relay,
            "CURL_CA_BUNDLE": str(self.ca),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # TF: no OAuth round trip
            "NO_GCE_CHECK": "true",  # TF and google-auth: not on a GCE VM, do not probe its metadata server
            "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "10000",  # a wrong endpoint fails in seconds, not minutes
            "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "200000",
            "GCS_RETRY_CONFIG_MAX_RETRIES": "3",
        }


def objects(gcs_url: str, bucket: str, prefix: str) -> list[str]:
    """Object names under `prefix`, straight from the emulator's JSON API."""
    names, token = [], None
    while True:
        query = {"prefix": prefix, **({"pageToken": token} if token else {})}
        url = f"{gcs_url}/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}"
        page = json.loads(urllib.request.urlopen(url, timeout=30).read())
        names += [item["name"] for item in page.get("items", [])]
        token = page.get("nextPageToken")
        if not token:
            return names


def download(gcs_url: str, bucket: str, name: str) -> bytes:
    url = f"{gcs_url}/download/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    return urllib.request.urlopen(url, timeout=60).read()


def upload(gcs_url: str, bucket: str, name: str, data: bytes) -> None:
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    request = urllib.request.Request(f"{gcs_url}/upload/storage/v1/b/{bucket}/o?{query}", data=data,
                                     headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    urllib.request.urlopen(request, timeout=60).read()


def anonymous_beam_credentials() -> None:
    """Beam's GCS credentials settled as anonymous in this process (as the emulator needs).
    Without this, Beam retries google.auth.default() with backoff for ~25 s before it goes
    anonymous by itself."""
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials, auth._Credentials._credentials_init = None, True


class AnonymousGcs(distributed.WorkerPlugin):
    """`anonymous_beam_credentials` on every worker of a Dask cluster, restarted ones too."""

    def setup(self, worker) -> None:
        anonymous_beam_credentials()


def main(argv: list[str]) -> None:
    """`python -m tests.reliability.gcs MODULE ARGS...`: runs `python -m MODULE ARGS` with Beam's
    GCS credentials settled as anonymous (`anonymous_beam_credentials`)."""
    import runpy

    anonymous_beam_credentials()
    sys.argv = argv
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
