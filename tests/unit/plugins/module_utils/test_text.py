"""Redaction of what leaves a host: every form an API key takes in sglang's, smg's and the argv's logs."""

from __future__ import annotations

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact, redact_json

KEY = "sk-" + "0a1b2c3d"


@pytest.mark.parametrize("line", [
    f"server_args=ServerArgs(api_key='{KEY}', port=30002)",
    f'{{"api_key": "{KEY}"}}',
    f"exec python3 -m sglang.launch_server --api-key {KEY} --port 1",
    f"--api-key={KEY}",
    f"argv: ['--api-key', '{KEY}', '--port', '1']",
    f'RouterConfig {{ api_key: Some("{KEY}"), port: 31000 }}',  # smg logs its args with Rust's Debug
    f"Authorization: Bearer {KEY}",
    f"headers={{'authorization': 'Bearer {KEY}'}}",
    f"x-api-key: {KEY}",
    f"SGLANG_API_KEY={KEY}",
])
def test_every_form_of_the_key_is_masked(line: str) -> None:
    assert KEY not in redact(line), redact(line)
    assert "***" in redact(line)


@pytest.mark.parametrize("line", [
    "ServerArgs(api_key='sk-a,b,c', port=1)",
    '{"api_key": "sk-a,b,c"}',
    'api_key: Some("sk-a,b,c")',
    "--api-key 'sk-a,b,c'",
    "--api-key sk-a,b,c --port 1",
])
def test_a_key_containing_commas_is_masked_whole(line: str) -> None:
    masked = redact(line)
    assert "sk-a" not in masked and "b,c" not in masked, masked


def test_the_rest_of_the_line_is_kept() -> None:
    masked = redact(f"ServerArgs(api_key='{KEY}', port=30002, json_model_override_args='{{\"index_topk\": 1024}}')")
    assert masked == "ServerArgs(api_key='***', port=30002, json_model_override_args='{\"index_topk\": 1024}')"
    assert redact('api_key: Some("x")') == 'api_key: Some("***")'


def test_json_secrets_are_masked_key_by_key_and_settings_kept() -> None:
    data = {"api_key": KEY, "admin_api_key": KEY, "max_total_tokens": 5, "nested": [{"hf_token": KEY}], "x": None,
            "api_key_none": None}
    assert redact_json(data) == {"api_key": "***", "admin_api_key": "***", "max_total_tokens": 5,
                                 "nested": [{"hf_token": "***"}], "x": None, "api_key_none": None}
