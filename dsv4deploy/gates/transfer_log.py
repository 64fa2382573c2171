"""Lines a PD server logs when its KV transfer takes a slower path than the one configured.

Each pattern is a warning sglang 0.5.23 itself writes (found in its source):
- `sglang/srt/disaggregation/mooncake/conn.py` and `nixl/conn.py`: "Prefill staging too small for N
  bytes, falling back" and "Decode staging too small: need ... falling back" (the staged bulk copy is
  given up for the per-layer path);
- `sglang/srt/disaggregation/nixl/conn.py`: "Installed NIXL does not support strided descriptors,
  falling back to per-block descriptors.";
- `sglang/srt/disaggregation/mooncake/utils.py`: "... Falling back to default memory pool." (the
  custom memory pool a faster Mooncake transport needs could not be set up).
Mooncake's own RDMA-to-TCP fallback is logged by its C++ library, not by sglang, so it is not here.
"""

from __future__ import annotations

import re

SLOWER_TRANSFER = re.compile(
    r"staging too small[^\n]*falling back"
    r"|falling back to per-block descriptors"
    r"|Falling back to default memory pool",
)
# At most this many lines per server are kept as evidence (a fallback may be logged per request).
KEPT = 3


def slower_transfer_lines(log_text: str) -> list[str]:
    """The log lines (stripped, at most KEPT, first ones) that show a slower KV transfer path."""
    found = [line.strip() for line in log_text.splitlines() if SLOWER_TRANSFER.search(line)]
    return found[:KEPT]
