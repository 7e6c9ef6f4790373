"""Pure helpers: path sanitizer, encoding, headers, pod IPs, gateway addresses, labels."""

from __future__ import annotations

import re

import pytest

from k8s_agent_sandbox.utils import (
    encode_path,
    generate_claim_name,
    sanitize_path,
    select_pod_ip,
    shutdown_time_after,
    timeout_header_value,
    utc_now_iso,
    validate_gateway_address,
    validate_labels,
    validate_namespace,
    validate_shutdown_after_seconds,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("hello.py", "hello.py"),
        ("dir/sub/file.txt", "dir/sub/file.txt"),
        ("/tmp/x.txt", "tmp/x.txt"),
        ("a//b", "a/b"),
        ("./a/./b", "a/b"),
        ("dir/", "dir"),
    ],
)
def test_sanitize_path_accepts(path: str, expected: str) -> None:
    assert sanitize_path(path) == expected


@pytest.mark.parametrize(
    "path",
    ["", "   ", ".", "..", "../etc/passwd", "a/../../b", "/etc/..", "//", "/", "a\x00b", "a\nb", "tab\there", "del\x7f", 5, None],
)
def test_sanitize_path_rejects(path: object) -> None:
    with pytest.raises(ValueError):
        sanitize_path(path)


@pytest.mark.parametrize(
    ("path", "encoded"),
    [
        ("hello.py", "hello%2Epy"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("a/b c", "a%2Fb%20c"),
        ("x@y!z", "x%40y%21z"),
        ("ü", "%C3%BC"),
        ("safe-_~", "safe-_~"),
    ],
)
def test_encode_path(path: str, encoded: str) -> None:
    assert encode_path(path) == encoded


@pytest.mark.parametrize(
    ("timeout", "header"),
    [
        (60, "60"),
        (2.5, "2.5"),
        ((3, 45), "45"),
        ((3, 1.5), "1.5"),
        (None, None),
        (True, None),
        (0, None),
        (-1, None),
        (float("inf"), None),
        (float("nan"), None),
        ((), None),
        ((3, None), None),
        ("60", None),
    ],
)
def test_timeout_header_value(timeout: object, header: str | None) -> None:
    assert timeout_header_value(timeout) == header


@pytest.mark.parametrize(
    ("pod_ips", "expected"),
    [
        ([{"ip": "10.0.0.5"}], "10.0.0.5"),
        ([{"ip": "fd00::5"}, {"ip": "10.0.0.5"}], "10.0.0.5"),
        ([{"ip": "FD00:0:0::5"}], "fd00::5"),
        ([{"ip": "::ffff:10.1.2.3"}], "10.1.2.3"),
        ([{"ip": "  10.0.0.7  "}], "10.0.0.7"),
        ([{"ip": "not-an-ip"}, {"ip": 42}, "garbage", {"ip": "10.0.0.9"}], "10.0.0.9"),
        (["10.0.0.8"], "10.0.0.8"),
        ([], None),
        (None, None),
        ("10.0.0.1", None),
        ([{"ip": ""}], None),
    ],
)
def test_select_pod_ip(pod_ips: object, expected: str | None) -> None:
    assert select_pod_ip(pod_ips) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.1.2.3", "10.1.2.3"),
        ("2001:db8::1", "[2001:db8::1]"),
        ("router.example.com", "router.example.com"),
        ("gw-1.internal.", "gw-1.internal."),
        ("2130706433", None),
        ("0x7f000001", None),
        ("0x7f.0x0.0x0.0x1", None),
        ("127.1", None),
        ("a" * 64 + ".example.com", None),
        ("evil.com/path", None),
        ("user@evil.com", None),
        ("evil.com?x", None),
        ("evil.com#x", None),
        ("bad_host.com", None),
        ("-lead.com", None),
        ("a..b", None),
        ("", None),
        (12345, None),
        ({"value": "x"}, None),
    ],
)
def test_validate_gateway_address(value: object, expected: str | None) -> None:
    assert validate_gateway_address(value) == expected


def test_validate_labels_matrix() -> None:
    ok = {"app": "demo", "example.com/team": "a.b-c_d", "empty": "", "A1": "Z9"}
    assert validate_labels(ok) == ok
    for bad in (
        {"": "x"},
        {"bad key": "x"},
        {"-lead": "x"},
        {"Example.COM/x": "y"},
        {"/x": "y"},
        {"k": "has space"},
        {"k": "x" * 64},
        {"k": "-lead"},
        {"k": 1},
        {"k" * 64: "v"},
    ):
        with pytest.raises(ValueError):
            validate_labels(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        validate_labels(["not", "a", "map"])  # type: ignore[arg-type]


def test_validate_shutdown_after_seconds() -> None:
    assert validate_shutdown_after_seconds(None) is None
    assert validate_shutdown_after_seconds(30) == 30
    for bad in (0, -5, True, 1.5, "30"):
        with pytest.raises(ValueError):
            validate_shutdown_after_seconds(bad)


def test_validate_namespace() -> None:
    assert validate_namespace("team-a") == "team-a"
    for bad in ("", "Default", "a_b", "-x", "x" * 64, "ns; rm -rf /", None):
        with pytest.raises(ValueError):
            validate_namespace(bad)


def test_claim_name_and_timestamps() -> None:
    names = {generate_claim_name() for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(r"sandbox-claim-[0-9a-f]{8}", n) for n in names)
    assert utc_now_iso().endswith("+00:00")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", shutdown_time_after(60))
