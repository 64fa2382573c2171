"""A key a header cannot carry never reaches httpx, whose error would quote it whole; a bearer token inside a
transport error is masked."""

from __future__ import annotations

import httpx
import pytest

from dsv4deploy.gates.http import auth_headers, describe_error, make_client


@pytest.mark.parametrize("key", ["sk-one\nsk-two", "sk one", "sk-\x00", "sk-é"])
def test_a_key_a_header_cannot_carry_is_refused_without_being_quoted(key: str) -> None:
    with pytest.raises(ValueError) as err:
        make_client(key)
    assert key not in str(err.value) and "one line" in str(err.value)


def test_a_plain_key_makes_the_bearer_header() -> None:
    assert auth_headers("sk-1") == {"Authorization": "Bearer sk-1"} and auth_headers(None) == {}


def test_a_bearer_token_in_a_transport_error_is_masked() -> None:
    shown = describe_error(httpx.LocalProtocolError("Illegal header value b'Bearer sk-secret-1'"))
    assert "sk-secret-1" not in shown and "Bearer ***" in shown
