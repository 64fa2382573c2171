"""``python -m dsv4deploy.sim.server <sglang launch_server flags>``: a simulated SGLang server.

Lifecycle like sglang: parse flags (argparse, exit 2), log ``server_args``, load weights (GPU
memory taken from the host's ledger, out-of-memory when it does not fit), open the HTTP port,
warm up (``/health`` 503), log the ready line, serve; SIGTERM: ``/health`` 503, exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from . import memory, ranks
from .engine import Engine
from .env import SimEnv, read_env
from .faults import FaultError
from .flags import parse_server_args, table_version
from .handler import Handler
from .ledger import Holding, Ledger, process_start_ticks
from .logs import Log, server_args_line, traceback_text
from .metrics import Metrics
from .pd import BootstrapServer, RoomStore
from .startup import ARCHITECTURE, Settings, StartupError, resolve


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = 2048  # uvicorn's backlog; the stdlib's 5 drops bursts of connections
    daemon_threads = True


# /model_info's "embedding" of sglang 0.5.23 for a generation model (as the real server answers it).
NO_EMBEDDING: dict[str, Any] = {
    "family": "none", "task": "none", "execution": "none", "attention": "none", "pooling": "model_defined",
    "normalize": False, "postprocessor": "none", "tokenizer_special_tokens": "model_default",
    "supports_dimensions": False, "supports_token_embeddings": False, "supports_multimodal": False,
    "requires_embedding_flag": False, "auto_enable_embedding": False, "bcg_eligibility": "disabled",
    "safe_disable_kv_cache": False, "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
    "enabled": False, "matryoshka_dimensions": [],
    "bcg": {"prefill_backend": "disabled", "enabled": False, "capture_token_budget": 4096, "capture_batch_sizes": [4]},
    "cache": {"kv_cache_disabled": False, "radix_cache_disabled": False, "chunked_prefill_disabled": False},
}

LOAD_SHARE = 0.7  # of DSV4_SIM_STARTUP_S spent loading weights (port closed), rest warming up


class SimServer:
    """State shared by the HTTP handlers of one simulated server process."""

    def __init__(self, env: SimEnv, settings: Settings, log: Log) -> None:
        self.env = env
        self.settings = settings
        self.log = log
        self.version = env.sglang_version
        self.engine = Engine(env.time_scale, env.faults.slow_decode)
        self.rooms = RoomStore(ttl_s=max(1.0, env.waiting_timeout_s))
        self.ledger = Ledger(env.state_dir)
        self.ready = False
        self.shutting_down = False
        self.startup_time = time.time()
        self._errors_left = env.faults.first_errors
        self._errors_lock = threading.Lock()
        self.metrics = Metrics(settings.served_name, settings.context_length)
        self.tokens_in_use = 0  # prompt and output tokens of the running requests (token_usage)
        self._served = 0  # generations started since ready (degrade_after)
        self.httpd: ThreadingHTTPServer | None = None
        self.bootstrap: BootstrapServer | None = None
        # A node of rank 1 and up of a multi-node server: it answers only a dummy /health (sglang #12297).
        self.dummy_health = int(settings.args.get("nnodes") or 1) > 1 and int(settings.args.get("node_rank") or 0) > 0
        self.rank_link: Any = None

    # -- faults consulted by the handler -----------------------------------------------------
    def take_first_error(self) -> bool:
        """True while the first_errors fault still has errors to give (after ready)."""
        if not self.ready:
            return False
        with self._errors_lock:
            if self._errors_left > 0:
                self._errors_left -= 1
                return True
        return False

    def take_serve_number(self) -> int:
        """How many generations this process started before this one (the degrade_after fault counts them)."""
        with self._errors_lock:
            self._served += 1
            return self._served - 1

    def degraded(self, number: int) -> bool:
        """Whether generation `number` (from take_serve_number) answers wrong: degrade_after=N from the N+1-th."""
        after = self.env.faults.degrade_after
        return after > 0 and number >= after

    def use_tokens(self, delta: int) -> None:
        """Count tokens of running requests in or out (the token_usage gauge)."""
        with self._errors_lock:
            self.tokens_in_use = max(0, self.tokens_in_use + delta)

    # -- views ------------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """``/server_info``: every resolved arg, version, start time, internal state."""
        # As the real 0.5.23 (compared side by side in tests/real_engine): the resolved args (not
        # argparse's --config, which ServerArgs consumes), each scheduler's state (its args again,
        # memory, throughput), the KV pool's size, the device and the server's status.
        args = {k: v for k, v in self.settings.args.items() if k != "config"}
        args["device"] = args.get("device") or "cuda"
        plan = self._plan()
        tp = int(args.get("tp_size") or 1)
        kv_tokens = int(plan.kv_pool_gib * GIB_TOKENS * tp)
        return {
            **args,
            "startup_time": self.startup_time,
            "internal_states": [{
                **args,
                "memory_usage": {"weight": round(plan.weights_gib, 2), "kvcache": round(plan.kv_pool_gib, 2)},
                "last_gen_throughput": 0.0,
                "effective_max_running_requests_per_dp": args.get("max_running_requests"),
                "world_size": tp,
            }],
            "max_total_num_tokens": kv_tokens,
            "max_req_input_len": max(1, self.settings.context_length - 5),
            "status": "ready" if self.ready else "starting",
            "version": self.version,
            "frontend": "python",
        }

    def model_info(self) -> dict[str, Any]:
        """``/model_info``."""
        a = self.settings.args
        return {
            "model_path": a["model_path"],
            "served_model_name": self.settings.served_name,
            "tokenizer_path": a.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": a.get("load_format", "auto"),
            "reasoning_parser": a.get("reasoning_parser"),
            "tool_call_parser": a.get("tool_call_parser"),
            "disaggregation_mode": self.settings.mode,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "deepseek_v4",
            "architectures": [ARCHITECTURE],
            # 0.5.23 describes the model's embedding support too (none for a generation model).
            **({"embedding": NO_EMBEDDING} if table_version(self.version) == "0.5.23" else {}),
        }

    def _plan(self) -> memory.MemoryPlan:
        s = self.settings
        return memory.plan(int(s.args.get("tp_size") or 1), float(s.args["mem_fraction_static"]),
                           self.env.gpu_memory_gib, s.index_topk, s.cuda_graph)

    # -- lifecycle ----------------------------------------------------------------------------
    def _oom(self, gib: float, held_gib: float, stage: str) -> StartupError:
        m = self.env.gpu_memory_gib
        plan = self._plan()
        in_use = held_gib + (plan.weights_gib if stage != "load_weights" else 0.0)
        frames = {
            "load_weights": [("sglang/srt/model_loader/loader.py", 1211, "load_weights",
                              "param.data.copy_(loaded_weight)")],
            "kv_pool": [("sglang/srt/mem_cache/deepseek_v4_memory_pool.py", 402, "__init__",
                         "self.kv_buffer = torch.zeros(...)")],
            "cuda_graph": [("sglang/srt/model_executor/cuda_graph_runner.py", 633, "capture",
                            "out = run_once()")],
        }[stage]
        gpu = self.settings.gpus[0] if self.settings.gpus else 0
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib:.2f} GiB. "
               f"GPU 0 has a total capacity of {m:.2f} GiB of which {max(0.0, m - in_use):.2f} GiB "
               f"is free. Process {os.getpid()} has {in_use - held_gib:.2f} GiB memory in use. "
               f"Of the allocated memory {in_use - held_gib:.2f} GiB is allocated by PyTorch. "
               f"(physical GPU {gpu}; mem_fraction_static="
               f"{self.settings.args['mem_fraction_static']})")
        return StartupError(traceback_text(
            [("sglang/srt/managers/scheduler.py", 412, "__init__", "self.tp_worker = TpModelWorker(...)"),
             *frames], msg))

    def load(self) -> None:
        """Weight loading, KV pool, CUDA graphs: take GPU memory or fail like sglang."""
        s, env, log = self.settings, self.env, self.log
        plan = self._plan()
        tp = int(s.args.get("tp_size") or 1)
        with self.ledger.locked():
            used = self.ledger.used_mib(env.gpu_count, exclude_pid=os.getpid())
            held_gib = max((used[g] for g in s.gpus), default=0) / 1024
            avail = env.gpu_memory_gib - held_gib
            log.line(f"Load weight begin. avail mem={avail:.2f} GB", "TP0")
            if env.faults.crash_on_start:
                raise StartupError(traceback_text(
                    [("sglang/srt/model_executor/model_runner.py", 903, "load_model",
                      "self.model = get_model(...)")],
                    "RuntimeError: CUDA error: unspecified launch failure (simulated crash_on_start)"))
            stage = memory.oom_stage(plan, env.gpu_memory_gib, held_gib)
            if stage is not None:
                raise self._oom(stage[1], held_gib, stage[0])
            self.ledger.write(Holding(
                pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()), gpus=list(s.gpus),
                mib_per_gpu=int(plan.pool_gib * 1024), process_name=sys.executable))
        time.sleep(env.startup_s * LOAD_SHARE * 0.6)
        log.line(f"Load weight end. type={ARCHITECTURE}, dtype=torch.bfloat16, "
                 f"avail mem={avail - plan.weights_gib:.2f} GB, mem usage={plan.weights_gib:.2f} GB.",
                 "TP0")
        if s.index_topk not in (512, 1024):
            raise StartupError(traceback_text([
                ("sglang/srt/model_executor/model_runner.py", 1702, "init_attention_backend",
                 "self.attn_backend = self._get_attention_backend()"),
                ("sglang/srt/layers/attention/deepseek_v4_backend.py", 881, "init_flashmla_related",
                 "assert self.index_topk in (512, 1024), ("),
            ], f"AssertionError: unexpected index_topk={s.index_topk}; supported: 512 (small) or 1024 (large)"))
        if env.faults.kv_pool_fallback and s.mode in ("prefill", "decode"):
            # sglang/srt/disaggregation/mooncake/utils.py when its custom pool cannot be set up: the
            # KV transfer then runs on a slower path than the one configured.
            log.line("Failed to import mooncake allocator for nvlink: No module named 'mooncake.allocator'. "
                     "Falling back to default memory pool.", "TP0")
        kv_tokens = int(plan.kv_pool_gib * GIB_TOKENS * tp)
        log.line(f"KV Cache is allocated. #tokens: {kv_tokens}, KV size: {plan.kv_pool_gib:.2f} GB", "TP0")
        if s.cuda_graph:
            log.line(f"Capture cuda graph begin. This can take up to several minutes. "
                     f"avail mem={avail - plan.pool_gib:.2f} GB", "TP0")
        time.sleep(env.startup_s * LOAD_SHARE * 0.4)
        if s.cuda_graph:
            log.line(f"Capture cuda graph end. Time elapsed: {env.startup_s * 0.28:.2f} s. "
                     f"mem usage={memory.CUDA_GRAPH_GIB:.2f} GB. avail mem="
                     f"{avail - plan.pool_gib - memory.CUDA_GRAPH_GIB:.2f} GB.", "TP0")
        log.line(f"max_total_num_tokens={kv_tokens}, chunked_prefill_size="
                 f"{s.args['chunked_prefill_size']}, max_prefill_tokens=16384, max_running_requests="
                 f"{s.args['max_running_requests']}, context_len={s.context_length}, "
                 f"available_gpu_mem={avail - plan.pool_gib:.2f} GB", "TP0")

    def open_ports(self) -> None:
        """HTTP (and, for a prefill, the bootstrap port); bind errors fail the start."""
        host, port = str(self.settings.args["host"]), int(self.settings.args["port"])
        try:
            if self.settings.mode == "prefill":
                bport = int(self.settings.args.get("disaggregation_bootstrap_port") or 8998)
                self.bootstrap = BootstrapServer(host, bport, self.rooms)
                threading.Thread(target=self.bootstrap.serve_forever, daemon=True).start()
            self.httpd = _HTTPServer((host, port), Handler)
        except OSError as exc:
            raise StartupError(f"OSError: [Errno {exc.errno}] {exc.strerror}: ({host!r}, {port})") from None
        self.httpd.daemon_threads = True
        self.httpd.sim = self  # type: ignore[attr-defined]
        self.log.raw(f"INFO:     Started server process [{os.getpid()}]")
        self.log.raw("INFO:     Waiting for application startup.")
        self.log.raw("INFO:     Application startup complete.")
        self.log.raw(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

    def warm_up(self) -> None:
        """Warm-up before ready (``/health`` answers 503 meanwhile)."""
        time.sleep(self.env.startup_s * (1 - LOAD_SHARE) + self.env.faults.warmup_s)
        if self.env.faults.never_ready or self.shutting_down:
            return
        self.ready = True
        self.log.line("The server is fired up and ready to roll!")

    def release_gpus(self) -> None:
        """Give the memory back now, or mark it held for ``slow_release`` seconds."""
        if self.env.faults.slow_release > 0:
            plan = self._plan()
            self.ledger.write(Holding(
                pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()),
                gpus=list(self.settings.gpus), mib_per_gpu=int(plan.pool_gib * 1024),
                process_name=sys.executable, release_at=time.time() + self.env.faults.slow_release))
        else:
            self.ledger.remove(os.getpid())

    def crash_later(self, after_s: float) -> None:
        """Die ``after_s`` seconds after the start, whatever it is doing then (a CUDA error mid-load or
        mid-serving, as a real server can): traceback, memory released, exit 1."""

        def crash() -> None:
            time.sleep(after_s)
            if self.shutting_down:
                return
            self.log.raw(traceback_text(
                [("sglang/srt/managers/scheduler.py", 2705, "run_scheduler_process", "scheduler.event_loop_normal()"),
                 ("sglang/srt/model_executor/model_runner.py", 1911, "forward", "return self.forward_extend(...)")],
                f"RuntimeError: CUDA error: an illegal memory access was encountered "
                f"(simulated crash_after_s={after_s:g})"))
            self.ledger.remove(os.getpid())
            os._exit(1)

        threading.Thread(target=crash, daemon=True).start()

    def stop(self, signum: int) -> None:
        """SIGTERM/SIGINT: refuse health checks, release, exit 0 promptly."""
        if self.shutting_down:
            return
        self.shutting_down = True
        self.log.line(f"Received signal {signum}; shutting down gracefully.")

        def finish() -> None:
            time.sleep(0.2)  # window in which /health answers 503, as during sglang's shutdown
            self.release_gpus()
            self.log.raw("INFO:     Shutting down")
            self.log.raw(f"INFO:     Finished server process [{os.getpid()}]")
            os._exit(0)

        threading.Thread(target=finish, daemon=True).start()


GIB_TOKENS = 1024 * 1024 * 1024 // (43 * 656)  # tokens per GiB of KV (43 layers, ~656 B/token/layer)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    log = Log()
    version = os.environ.get("DSV4_SIM_SGLANG_VERSION", "").strip() or "0.5.23"
    try:
        table_version(version)
    except ValueError as exc:
        print(f"dsv4deploy.sim.server: {exc}", file=sys.stderr)
        return 2
    args = parse_server_args(argv, version)  # SystemExit(2) with argparse's message
    try:
        env = read_env()
    except (FaultError, ValueError) as exc:
        print(f"dsv4deploy.sim.server: {exc}", file=sys.stderr)
        return 2
    sim: SimServer | None = None
    try:
        try:
            settings = resolve(args, env)
        except StartupError:
            log.line(server_args_line(args, version))
            raise
        log.line(server_args_line(settings.args, version))
        sim = SimServer(env, settings, log)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: (sim.stop(signum) if sim else os._exit(0)))
        if env.faults.crash_after_s > 0:
            sim.crash_later(env.faults.crash_after_s)
        if int(settings.args.get("nnodes") or 1) > 1:
            try:
                # Rank 1+'s link to rank 0 stays open while it runs: rank 0 watches it (and keeps its port).
                sim.rank_link = ranks.rendezvous(settings.args, log)
            except OSError as exc:  # a timeout, or rank 0's dist-init port taken
                raise StartupError(f"RuntimeError: {exc}") from None
        sim.load()
        sim.open_ports()
        threading.Thread(target=sim.warm_up, daemon=True).start()
        assert sim.httpd is not None
        sim.httpd.serve_forever(poll_interval=0.2)
    except StartupError as exc:
        log.raw(exc.text)
        if sim is not None:
            sim.ledger.remove(os.getpid())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

