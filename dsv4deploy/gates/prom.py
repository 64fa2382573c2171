"""Read a server's Prometheus text with ``prometheus_client``'s own parser: histograms, their change
between two scrapes, and quantiles from buckets the way Prometheus' ``histogram_quantile`` takes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# sglang's own metrics are `sglang:name`; some builds and dashboards (llm-d's) write `sglang_name`. Both
# are read as `sglang:name`, the spelling every gate asks for. smg's `smg_*` are left as they are.
SGLANG_PREFIX = "sglang:"
SGLANG_UNDERSCORE_PREFIX = "sglang_"


def canonical_name(name: str) -> str:
    """`name` with sglang's `sglang_` prefix written `sglang:` (any other name unchanged)."""
    if name.startswith(SGLANG_UNDERSCORE_PREFIX):
        return SGLANG_PREFIX + name[len(SGLANG_UNDERSCORE_PREFIX):]
    return name


class MetricsFormatError(ValueError):
    """Text that is not the Prometheus exposition format."""


@dataclass
class Hist:
    """One histogram, every label set added together: cumulative bucket counts by upper bound."""

    buckets: dict[float, float] = field(default_factory=dict)
    total: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Hist) -> Hist:
        """What was observed since `earlier` (the same server, scraped before)."""
        return Hist({le: c - earlier.buckets.get(le, 0.0) for le, c in self.buckets.items()},
                    self.total - earlier.total, self.count - earlier.count)

    def quantile(self, q: float) -> float | None:
        """The q-quantile, linear inside its bucket (as ``histogram_quantile``); None without observations."""
        if self.count <= 0:
            return None
        bounds = sorted(self.buckets)
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le in bounds:
            cumulative = self.buckets[le]
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # in the open top bucket: its lower bound is all one can say
                in_bucket = cumulative - below
                share = (rank - below) / in_bucket if in_bucket > 0 else 0.0
                return lower + (le - lower) * share
            lower, below = le, cumulative
        return lower

    @property
    def mean(self) -> float | None:
        """Sum over count; None without observations."""
        return self.total / self.count if self.count > 0 else None


@dataclass
class Scrape:
    """What one ``/metrics`` answer says: histograms and plain values (counters, gauges), by family name."""

    histograms: dict[str, Hist] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)


def parse(text: str) -> Scrape:
    """Parse Prometheus text; raise MetricsFormatError naming the problem when it is not valid."""
    out = Scrape()
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsFormatError(f"not Prometheus text: {exc}") from None
    for family in families:
        if family.type == "histogram":
            hist = out.histograms.setdefault(canonical_name(family.name), Hist())
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    hist.buckets[le] = hist.buckets.get(le, 0.0) + sample.value
                elif sample.name.endswith("_sum"):
                    hist.total += sample.value
                elif sample.name.endswith("_count"):
                    hist.count += sample.value
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            # A counter's family is named without _total; key by the sample's name, as servers write it.
            name = canonical_name(sample.name)
            out.values[name] = out.values.get(name, 0.0) + sample.value
    return out


def delta(before: Scrape, after: Scrape) -> Scrape:
    """What happened between two scrapes of one server: histograms and counters subtracted, gauges as after."""
    hists = {name: h.minus(before.histograms.get(name, Hist())) for name, h in after.histograms.items()}
    values = {name: v - before.values.get(name, 0.0) if name.endswith("_total") else v
              for name, v in after.values.items()}
    return Scrape(hists, values)


def summarize(change: Scrape, names: Mapping[str, str]) -> dict[str, float | None]:
    """Figures from a scrape delta: ``names`` maps a figure to ``metric@p50``, ``metric@mean`` or ``metric``."""
    out: dict[str, float | None] = {}
    for figure, spec in names.items():
        metric, _, how = spec.partition("@")
        if how:
            hist = change.histograms.get(metric)
            if hist is None:
                out[figure] = None
            elif how == "mean":
                out[figure] = hist.mean
            else:
                out[figure] = hist.quantile(float(how.lstrip("p")) / 100)
        else:
            out[figure] = change.values.get(metric)
    return out


def by_label(text: str, sample: str, label: str) -> dict[str, float]:
    """One sample's values summed per value of `label` (smg's ``smg_http_responses_total{status_code}``)."""
    out: dict[str, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsFormatError(f"not Prometheus text: {exc}") from None
    for family in families:
        for s in family.samples:
            if s.name == sample:
                key = s.labels.get(label, "")
                out[key] = out.get(key, 0.0) + s.value
    return out
