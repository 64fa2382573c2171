"""The GPU a contract test states, for sglang's start-up resolution on a CPU-only machine (test harness only).

Copied with a `stated_gpu.json` and ../stubs/stub_finder.py beside it into a folder first on the child's
PYTHONPATH: Python imports it at start, before sglang. sglang asks torch.cuda whether a GPU is there, its
capability and name, and (with no nvidia-smi on PATH) its memory through torch.cuda.mem_get_info; those
answers come from the JSON ({"name", "memory_mib", "capability": [major, minor], "count", "cuda"}). Modules
named in "stub_modules" (GPU kernels and extras a CPU wheel set lacks: sgl_kernel, flashinfer, ...) import as
empty stubs; resolution only imports them. Production never loads this: on a GPU host the same script asks
the real GPU.
"""
import json
import os

from stub_finder import install

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "stated_gpu.json"), encoding="utf-8") as fh:
    _GPU = json.load(fh)

install(_GPU.get("stub_modules", ()))

import torch  # noqa: E402  (after the stubs: torch's own imports are real)

_TOTAL = int(_GPU["memory_mib"]) * 1024 * 1024
torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: False
torch.cuda.device_count = lambda: int(_GPU["count"])
torch.cuda.get_device_capability = lambda device=None: tuple(_GPU["capability"])
torch.cuda.get_device_name = lambda device=None: _GPU["name"]
torch.cuda.mem_get_info = lambda device=None: (_TOTAL, _TOTAL)
# torchvision (0.5.23's wheel set) checks torch's CUDA major against its own build.
torch.version.cuda = _GPU.get("cuda", "12.9")
