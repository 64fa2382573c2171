"""Test-only runtime patch for the real-engine tier's PD servers on CPU (never shipped).

sglang 0.5.23's mooncake sender declares ``supports_host_tensor_indices = True``, which sends a
prefill's first real request down a pinned-memory / ``torch.cuda.Event`` path that needs CUDA. On a
CPU-only machine the class gets False, so the generic transfer path runs. Python imports this module
at start because its folder is on ``PYTHONPATH``; the patch applies when sglang imports the class.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

TARGET = "sglang.srt.disaggregation.mooncake.conn"


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
            module.MooncakeKVSender.supports_host_tensor_indices = False

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchOnLoad())
