"""Test-only runtime patch for the real-engine tier's PD servers on CPU (never shipped).

sglang 0.5.23's mooncake sender declares ``supports_host_tensor_indices = True``, which sends a
prefill's first real request down a pinned-memory / ``torch.cuda.Event`` path that needs CUDA. On a
CPU-only machine the class gets False, so the generic transfer path runs. Python imports this module
at start because its folder is on ``PYTHONPATH``; the patch applies when sglang imports the class.

A test-only fault in the same patch: while the file that ``DSV4_TEST_KV_DROP_FILE`` names exists, the
prefill's KV sends (``MooncakeKVManager._send_kvcache_generic``, the KV pool's pages, not the aux data
with the first token) fill the decode's slots for the second half of each request's pages with copies of
the first half's: half of the prompt's KV is lost, replaced by entries of other positions. (Dropping the
pages would not do: a decode slot freed by an earlier run of the same prompt may still hold the right
entry; nor would permuting them: attention over the whole prompt does not see the order.) A file, not an
environment switch, so that a test turns it on and off on a running PD pair (a restart costs a minute
here). The seeds' first hypothesis, a KV transfer that loses part of the cache, made real.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

TARGET = "sglang.srt.disaggregation.mooncake.conn"
DROP_SWITCH = os.environ.get("DSV4_TEST_KV_DROP_FILE", "")


def _dropping_half(send: Any) -> Any:
    """``_send_kvcache_generic`` that, while the switch file exists, sends the first half of the pages again into
    the decode's slots for the second half."""

    @functools.wraps(send)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        pages = kwargs.get("prefill_data_indices")
        if not (DROP_SWITCH and os.path.exists(DROP_SWITCH)):
            return send(self, *args, **kwargs)
        fires = (not args and pages is not None and len(pages) > 1 and kwargs.get("state_type") is None
                 and kwargs.get("dst_device_data_indices") is None)
        # What the switch saw, for the test to show (a fault that never fires must say so).
        with open(DROP_SWITCH + ".log", "a", encoding="utf-8") as log:
            log.write(f"pages={None if pages is None else len(pages)} positional={len(args)} "
                      f"state_type={kwargs.get('state_type')} fired={fires}\n")
        if fires:
            src = pages.copy()
            half = len(src) // 2
            src[len(src) - half:] = pages[:half]
            kwargs["prefill_data_indices"] = src
        return send(self, *args, **kwargs)

    return wrapper


def _patch(module: ModuleType) -> None:
    if module.__name__ == TARGET:
        module.MooncakeKVSender.supports_host_tensor_indices = False
        if DROP_SWITCH:
            manager = module.MooncakeKVManager
            manager._send_kvcache_generic = _dropping_half(manager._send_kvcache_generic)


class _PatchOnLoad(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchOnLoad())
