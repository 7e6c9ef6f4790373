"""Validation and encoding helpers shared by the sync and async clients."""

from __future__ import annotations

import datetime as _dt
import ipaddress
import math
import posixpath
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard
from urllib.parse import quote

from .constants import CLAIM_NAME_PREFIX

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
_NUMERIC_LABEL = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")


def is_dns_label(value: object) -> TypeGuard[str]:
    """True when ``value`` is an RFC 1123 label (lower case, 1-63 chars, interior '-')."""
    return isinstance(value, str) and bool(_DNS_LABEL.match(value))


def is_dns_subdomain(value: object) -> TypeGuard[str]:
    """True when ``value`` is an RFC 1123 subdomain (object names of most kinds)."""
    return isinstance(value, str) and 0 < len(value) <= 253 and bool(_DNS_SUBDOMAIN.match(value))


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` or raise ``ValueError`` when it is not a DNS label."""
    if not is_dns_label(namespace):
        raise ValueError(
            f"Invalid namespace {namespace!r}: a namespace must be a lower-case RFC 1123 label "
            "(a-z, 0-9 and '-', at most 63 characters)."
        )
    return namespace


def validate_label_key(key: object) -> None:
    """Raise ``ValueError`` unless ``key`` is a valid Kubernetes label/annotation key."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"Invalid label key {key!r}: keys must be non-empty strings.")
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"Invalid label key {key!r}: the prefix must be a DNS subdomain.")
    if not _LABEL_NAME.match(name):
        raise ValueError(
            f"Invalid label key {key!r}: the name part must be at most 63 characters of "
            "[A-Za-z0-9-_.], starting and ending with an alphanumeric character."
        )


def validate_labels(labels: Mapping[str, str] | None, what: str = "labels") -> dict[str, str]:
    """Validate a label map with Kubernetes label syntax and return a copy."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ValueError(f"{what} must be a mapping of strings to strings, got {type(labels).__name__}.")
    out: dict[str, str] = {}
    for key, value in labels.items():
        validate_label_key(key)
        if not isinstance(value, str):
            raise ValueError(f"Invalid value for label {key!r}: {value!r} is not a string.")
        if value and not _LABEL_NAME.match(value):
            raise ValueError(
                f"Invalid value {value!r} for label {key!r}: values must be empty or at most 63 "
                "characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric character."
            )
        out[key] = value
    return out


def validate_annotations(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """Validate annotation keys (Kubernetes key syntax) and string values; return a copy."""
    if annotations is None:
        return {}
    if not isinstance(annotations, Mapping):
        raise ValueError("pod_annotations must be a mapping of strings to strings.")
    out: dict[str, str] = {}
    for key, value in annotations.items():
        validate_label_key(key)
        if not isinstance(value, str):
            raise ValueError(f"Invalid value for annotation {key!r}: {value!r} is not a string.")
        out[key] = value
    return out


def validate_shutdown_after_seconds(value: object) -> int | None:
    """Accept ``None`` or a positive ``int`` (bools, floats and strings are rejected)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"shutdown_after_seconds must be a positive integer number of seconds, got {value!r}."
        )
    if value <= 0:
        raise ValueError(f"shutdown_after_seconds must be positive, got {value}.")
    return value


def validate_port(port: object, what: str = "port") -> int:
    """Return ``port`` when it is an int in [1, 65535], else raise ``ValueError``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{what} must be an integer between 1 and 65535, got {port!r}.")
    return port


def generate_claim_name() -> str:
    """A fresh claim name: ``sandbox-claim-`` followed by 8 hex characters."""
    return CLAIM_NAME_PREFIX + uuid.uuid4().hex[:8]


def utc_now_iso() -> str:
    """The current UTC time in ISO 8601 with an explicit offset (``...+00:00``)."""
    return _dt.datetime.now(_dt.UTC).isoformat()


def shutdown_time_after(seconds: int) -> str:
    """``now + seconds`` in UTC formatted as ``%Y-%m-%dT%H:%M:%SZ``."""
    when = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def sanitize_path(path: object) -> str:
    """Normalize a sandbox path for ``files.write``/``files.read``.

    Rejects non-strings, control characters, blank paths, ``.`` and any ``..``
    segment; collapses ``//`` and ``./``; strips the leading ``/`` so the path
    is relative to the sandbox workspace. Relative sub-paths (``dir/file``) are
    allowed.
    """
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {type(path).__name__}.")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise ValueError(f"Invalid path {path!r}: control characters are not allowed.")
    if not path.strip() or path.strip() == ".":
        raise ValueError(f"Invalid path {path!r}: the path must name a file.")
    if ".." in path.split("/"):
        raise ValueError(
            f"Invalid path {path!r}: '..' segments are not allowed "
            "(pass allow_unsafe_paths=True to send the path unchanged)."
        )
    normalized = posixpath.normpath(path).lstrip("/")
    if normalized in ("", "."):
        raise ValueError(f"Invalid path {path!r}: the path must name a file, not the workspace root.")
    return normalized


def encode_path(path: str) -> str:
    """Percent-encode ``path`` as one URL segment.

    Every byte outside ``A-Za-z0-9-_~`` is encoded, including ``/`` and ``.``:
    dots are sent as ``%2E`` so that ``.``/``..`` never form literal dot
    segments that a Go router would answer with a redirect. The runtime decodes
    path parameters, so the result names the same file.
    """
    return quote(path, safe="").replace(".", "%2E")


def timeout_header_value(timeout: object) -> str | None:
    """The ``X-Sandbox-Timeout`` value for a requests-style timeout, or ``None``.

    Numbers are sent as ``str(timeout)``; for a ``(connect, read)`` tuple the
    last element is used; bools, ``None``, non-positive and non-finite values
    are omitted.
    """
    if isinstance(timeout, tuple):
        if not timeout:
            return None
        timeout = timeout[-1]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        return None
    if not math.isfinite(timeout) or timeout <= 0:
        return None
    return str(timeout)


def _entry_ip(entry: object) -> str | None:
    if isinstance(entry, Mapping):
        entry = entry.get("ip")
    if not isinstance(entry, str):
        return None
    return entry.strip() or None


def select_pod_ip(pod_ips: Iterable[Any] | None) -> str | None:
    """Pick the address to send as ``X-Sandbox-Pod-IP`` from ``status.podIPs``.

    Accepts ``[{"ip": ...}]`` or plain strings. The first IPv4 address wins
    (IPv4-mapped IPv6 counts as IPv4); otherwise the first valid IPv6 address,
    canonicalized. Invalid and non-string entries are skipped.
    """
    if not pod_ips or isinstance(pod_ips, (str, bytes)):
        return None
    first_v6: str | None = None
    for entry in pod_ips:
        raw = _entry_ip(entry)
        if raw is None:
            continue
        try:
            addr = ipaddress.ip_address(raw)
        except ValueError:
            continue
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        if isinstance(addr, ipaddress.IPv4Address):
            return str(addr)
        if first_v6 is None:
            first_v6 = str(addr)
    return first_v6


def sandbox_pod_ip(sandbox: Mapping[str, Any] | None) -> str | None:
    """:func:`select_pod_ip` of a Sandbox object's ``status.podIPs`` (``None`` for no object)."""
    return select_pod_ip(((sandbox or {}).get("status") or {}).get("podIPs"))


def format_host(host: str) -> str:
    """Bracket IPv6 literals for use in a URL authority."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    return f"[{addr}]" if isinstance(addr, ipaddress.IPv6Address) else str(addr)


def validate_gateway_address(value: object) -> str | None:
    """Return a URL-ready host for a Gateway ``status.addresses[].value``, or ``None``.

    Accepts IP literals (IPv6 bracketed) and DNS hostnames. Rejects non-strings,
    URL metacharacters (``/?#@``), labels over 63 characters, empty labels,
    characters outside ``[A-Za-z0-9.-]`` and hostnames whose labels are all
    numeric or hex (disguised IPs such as ``2130706433`` or ``0x7f.0x1``).
    """
    if not isinstance(value, str):
        return None
    host = value.strip()
    if not host or any(ch in host for ch in "/?#@"):
        return None
    try:
        return format_host(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    if len(host) > 253:
        return None
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        return None
    if all(_NUMERIC_LABEL.match(label) for label in labels):
        return None
    return host
