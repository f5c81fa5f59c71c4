"""The fetch package's pure parts, without a network: Retry-After parsing, the size limit, charset
decoding, the address guard, URL redaction, error pickling and ``${NAME}`` expansion."""

from __future__ import annotations

import gzip
import itertools
import pickle
import zlib
from email.utils import formatdate

import pytest

from scrape_contracts.adapters.fetch import (
    FetchError,
    TooLarge,
    decode_html,
    expand_header_values,
    read_limited,
    redact_url,
    retry_after_seconds,
)
from scrape_contracts.adapters.fetch.body import BodyReader
from scrape_contracts.adapters.netguard import AddressBlocked, AddressGuard
from scrape_contracts_tests.adapters.test_fetch import resolver_from


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_read_limited_stops_an_endless_stream() -> None:
    with pytest.raises(TooLarge) as caught:
        read_limited(itertools.repeat(b"x" * 1000), max_bytes=10_000)
    assert caught.value.seen == 11_000
    assert read_limited([b"ab", b"cd"], max_bytes=4) == b"abcd"


@pytest.mark.parametrize(
    ("body", "content_type", "text", "encoding"),
    [
        ("Café €".encode("cp1252"), "text/html; charset=windows-1252", "Café €", "cp1252"),
        ("Café".encode("utf-8"), 'text/html; charset="UTF-8"', "Café", "utf-8"),
        # latin-1 labels are read as windows-1252, as browsers do
        ("Café – €".encode("cp1252"), "text/html; charset=ISO-8859-1", "Café – €", "cp1252"),
        ("<meta charset=windows-1251>Привет".encode("cp1251"), None, "<meta charset=windows-1251>Привет", "cp1251"),
        (
            b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">' + "Мир".encode("koi8-r"),
            "text/html",
            '<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">Мир',
            "koi8-r",
        ),
        ("Café".encode("utf-8-sig"), "text/html; charset=cp1252", "Café", "utf-8"),  # BOM wins
        ("déjà vu".encode("utf-8"), None, "déjà vu", "utf-8"),
        # detection alone ranks cp1250 first here, which would turn "è" into "č"
        ("<p>Crème brûlée – 7,00 €</p>".encode("cp1252"), None, "<p>Crème brûlée – 7,00 €</p>", "cp1252"),
        ("x".encode(), "text/html; charset=no-such-charset", "x", "utf-8"),
    ],
)
def test_decode_html(body: bytes, content_type: str | None, text: str, encoding: str) -> None:
    assert decode_html(body, content_type) == (text, encoding)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1", "0.0.0.0",
        "224.0.0.1", "240.0.0.1", "100.64.0.1", "::1", "::", "fe80::1%eth0", "fc00::1", "ff02::1",
        "::ffff:127.0.0.1", "169.254.169.254", "fd00:ec2::254",
    ],
)
def test_guard_blocks_non_public_addresses(address: str) -> None:
    guard = AddressGuard(resolver=resolver_from({"target.test": [address]}))
    with pytest.raises(AddressBlocked):
        guard.check("https://target.test/")


def test_guard_allows_public_addresses_and_respects_opt_in() -> None:
    resolver = resolver_from(
        {"public.test": ["93.184.216.34", "2606:4700:4700::1111"], "lan.test": ["192.168.1.5"]}
    )
    AddressGuard(resolver=resolver).check("https://public.test/a")
    AddressGuard(resolver=resolver, allow_private=True).check("http://lan.test/")
    AddressGuard(allow_private=True).check("http://127.0.0.1:8080/")

    with pytest.raises(AddressBlocked) as caught:
        AddressGuard(resolver=resolver).check("http://lan.test/")
    assert caught.value.opt_in_helps


def test_guard_metadata_address_stays_blocked_with_opt_in() -> None:
    guard = AddressGuard(allow_private=True)
    urls = ("http://169.254.169.254/latest/", "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/")
    for url in urls:
        with pytest.raises(AddressBlocked) as caught:
            guard.check(url)
        assert "metadata" in str(caught.value) and not caught.value.opt_in_helps


def test_guard_literal_ip_needs_no_resolver_and_allowed_hosts_are_exact() -> None:
    def no_dns(host: str) -> list[str]:
        raise AssertionError(f"resolver called for {host}")

    guard = AddressGuard(resolver=no_dns, allowed_hosts=("127.0.0.1:8000",))
    guard.check("http://127.0.0.1:8000/x")
    for url in ("http://10.0.0.1/", "http://127.0.0.1:8001/", "http://127.0.0.1/"):
        with pytest.raises(AddressBlocked):
            guard.check(url)
    with pytest.raises(AddressBlocked, match="scheme 'gopher'"):
        guard.check("gopher://127.0.0.1:8000/")


def test_redact_url() -> None:
    assert redact_url("https://user:pw@example.test:8443/a?b=1") == "https://***@example.test:8443/a?b=1"
    assert redact_url("https://token@example.test/") == "https://***@example.test/"
    assert redact_url("https://example.test/a@b") == "https://example.test/a@b"
    assert redact_url("https://example.test/") == "https://example.test/"


def test_fetch_error_survives_pickling() -> None:
    error = FetchError(
        "GET x failed", kind="http_status", url="x", status=503, transient=True, attempts=({"a": 1},)
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.kind, copy.url, copy.status, copy.transient, copy.attempts) == (
        "GET x failed", "http_status", "x", 503, True, ({"a": 1},)
    )


def test_expand_header_values_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SC_TEST_TOKEN", "from-the-environment")
    expanded = expand_header_values({"X-Api-Key": "${SC_TEST_TOKEN}", "Accept-Language": "en"})
    assert expanded.headers == {"X-Api-Key": "from-the-environment", "Accept-Language": "en"}
    assert expanded.secrets == ("from-the-environment",)
    assert "from-the-environment" not in repr(expanded)



@pytest.mark.parametrize("split", [1, 2, 7, 65536])
@pytest.mark.parametrize("compress", [gzip.compress, zlib.compress, lambda data: zlib.compress(data)[2:-4]])
def test_body_reader_inflates_whatever_the_chunking(compress, split: int) -> None:
    # zlib-wrapped and raw deflate are told apart by the first two bytes, which may arrive one at a time
    html = b"<p>" + b"row " * 5000 + b"</p>"
    wire = compress(html)
    coding = "gzip" if wire[:2] == b"\x1f\x8b" else "deflate"
    reader = BodyReader(coding, max_bytes=len(html))
    for start in range(0, len(wire), split):
        reader.feed(wire[start : start + split])
    assert reader.finish() == html


def test_body_reader_limit_counts_inflated_bytes() -> None:
    reader = BodyReader("gzip", max_bytes=100_000)
    with pytest.raises(TooLarge) as caught:
        reader.feed(gzip.compress(b"a" * 1_000_000))
    # stopped within one inflation step of the limit, not after inflating everything
    assert 100_000 < caught.value.seen <= 100_000 + 64 * 1024
