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

For that fault to show, the model's output must depend on the KV it attends to. sglang's dummy weights
(``--load-format dummy``) are drawn from +-1e-3: every layer's contribution is then a thousandth of the
residual stream, the logits follow the last token alone, and half the KV replaced moved no logprob (delta 0,
three runs). With ``DSV4_TEST_DUMMY_WEIGHT_RANGE`` set (the tier sets 0.5 on every server, so PD and combined
still draw the same weights: sglang seeds each parameter alike) they are drawn from +-range instead; measured
offline with the tier's config in bf16, +-0.5 is the smallest of 0.05/0.2/0.5 where the fault changes the
greedy tokens after the first (24- and 300-token prompts), and it gives no NaN.
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
LOADER = "sglang.srt.model_loader.loader"
DROP_SWITCH = os.environ.get("DSV4_TEST_KV_DROP_FILE", "")
WEIGHT_RANGE = os.environ.get("DSV4_TEST_DUMMY_WEIGHT_RANGE", "")


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


def _wider(initialize: Any, bound: float) -> Any:
    """``initialize_dummy_weights`` drawing from +-``bound`` (its seed and everything else as they are)."""

    @functools.wraps(initialize)
    def wrapper(model: Any, low: float = -1e-3, high: float = 1e-3, **kwargs: Any) -> None:
        initialize(model, low=-bound, high=bound, **kwargs)

    return wrapper


def _patch(module: ModuleType) -> None:
    if module.__name__ == TARGET:
        module.MooncakeKVSender.supports_host_tensor_indices = False
        if DROP_SWITCH:
            manager = module.MooncakeKVManager
            manager._send_kvcache_generic = _dropping_half(manager._send_kvcache_generic)
    elif module.__name__ == LOADER and WEIGHT_RANGE:
        module.initialize_dummy_weights = _wider(module.initialize_dummy_weights, float(WEIGHT_RANGE))


class _PatchOnLoad(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in (TARGET, LOADER):
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
