"""dsv4deploy.gates.prom: sglang's metrics read the same under `sglang:` and `sglang_` prefixes."""

from __future__ import annotations

import pytest

from dsv4deploy.gates import prom

TEXT = """\
# TYPE {p}num_requests_total counter
{p}num_requests_total{{model_name="m"}} 7
# TYPE {p}time_to_first_token_seconds histogram
{p}time_to_first_token_seconds_bucket{{le="0.1"}} 2
{p}time_to_first_token_seconds_bucket{{le="1.0"}} 4
{p}time_to_first_token_seconds_bucket{{le="+Inf"}} 4
{p}time_to_first_token_seconds_sum 1.0
{p}time_to_first_token_seconds_count 4
# TYPE smg_http_responses_total counter
smg_http_responses_total{{status_code="200"}} 3
"""


@pytest.mark.parametrize("prefix", ["sglang:", "sglang_"])
def test_both_sglang_prefixes_read_as_sglang_colon(prefix: str) -> None:
    scrape = prom.parse(TEXT.format(p=prefix))
    assert scrape.values["sglang:num_requests_total"] == 7
    assert scrape.histograms["sglang:time_to_first_token_seconds"].count == 4
    assert scrape.values["smg_http_responses_total"] == 3  # smg's own names are left alone
