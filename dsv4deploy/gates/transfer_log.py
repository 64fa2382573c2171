"""Lines a PD server logs when its KV transfer takes a slower path than the one configured.

Each pattern is a warning sglang 0.5.23 itself writes (found in its source):
- `sglang/srt/disaggregation/mooncake/conn.py` and `nixl/conn.py`: "Prefill staging too small for N
  bytes, falling back" and "Decode staging too small: need ... falling back" (the staged bulk copy is
  given up for the per-layer path);
- `sglang/srt/disaggregation/nixl/conn.py`: "Installed NIXL does not support strided descriptors,
  falling back to per-block descriptors.";
- `sglang/srt/disaggregation/mooncake/utils.py`: "... Falling back to default memory pool." (the
  custom memory pool a faster Mooncake transport needs could not be set up).
Mooncake's own choice of transport is logged by its C++ library (glog, on the server's stderr), not by
sglang: `mooncake_transport` reads it. From mooncake-transfer-engine/src/transfer_engine_impl.cpp
(`TransferEngineImpl::init`; the same strings are in the mooncake-transfer-engine 0.3.13 wheel's engine.so):
- "Topology discovery complete. Found N HCAs." then, with N > 0, "installTransport, type=rdma" (or another
  RDMA-class type); with N = 0 it installs the TCP transport and logs nothing more: N = 0 is the TCP line;
- "MC_FORCE_TCP is set, using TCP transport only" when TCP was forced.
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


_MOONCAKE_INSTALLED = re.compile(r"installTransport, type=(\w+)")
_MOONCAKE_NO_HCA = re.compile(r"Topology discovery complete\. Found 0 HCAs")
_MOONCAKE_FORCED_TCP = re.compile(r"MC_FORCE_TCP is set, using TCP transport only")


def mooncake_transport(log_text: str) -> tuple[str, str] | None:
    """The transport mooncake chose, from its own last line saying so: ("rdma" or another installed type, or
    "tcp"; the line), or None when the log has no such line (mooncake not used, or not started yet)."""
    found = None
    for line in log_text.splitlines():
        installed = _MOONCAKE_INSTALLED.search(line)
        if installed:
            found = (installed.group(1), line.strip())
        elif _MOONCAKE_NO_HCA.search(line) or _MOONCAKE_FORCED_TCP.search(line):
            found = ("tcp", line.strip())
    return found
