"""Hostile and broken specs: every user-controllable field, every nasty value, plus property-based fuzzing.

Each case ends in one of two ways, and nothing else: a SpecError whose problems name the field (no other
exception, no traceback), or, for the values that only ever reach a serve script as shell-quoted data
(environment values, extra_args), a release whose scripts hand the value to the program unchanged with
nothing executed. The playbook side (install root unchanged byte for byte) is in
tests/integration/test_hostile_deploy.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4deploy import cli
from dsv4deploy.plan import make_plan
from dsv4deploy.plan.render import render_all
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, SpecError, load_spec

CANARY = "/tmp/dsv4-hostile-canary"
# The values the issue names: quotes, $(...), backticks, ';', newlines, '%', '\\', '..', absolute paths.
HOSTILE = [
    "it's", 'say "hi"', f"$(touch {CANARY})", f"`touch {CANARY}`", f"x; touch {CANARY}", "a\nb", "a\rb",
    "%(here)s", "100%", "a\\", "../../etc", "/etc/passwd", "a ;b", "a #b", "", " ", "\t", "a\x00b",
]


def base() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A valid PD deployment on one supervisor host, with a key (so 0.0.0.0 is allowed)."""
    common = {
        "topology": "pd",
        "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash"},
        "index_topk": 1024,
        "chat_template": "/models/chat_template.jinja",
        "prefill": [{"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001, "bootstrap_port": 8998,
                     "mem_fraction_static": 0.8, "env": {"A": "1"}, "extra_args": ["--enable-metrics"]}],
        "decode": [{"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.8}],
        "router": {"host": "gpu1", "port": 30000, "prometheus_port": 29001, "policy": "round_robin"},
        "api_key": {"file": "/etc/dsv4deploy/api_key"},
        "server_env": {"B": "2"},
    }
    hosts = {"gpu1": {"ansible_host": "10.0.0.11", "service_manager": "supervisor", "install_root": "/opt/dsv4deploy",
                      "service_user": "sglang", "sglang_version": "0.5.23", "listen": "127.0.0.1"}}
    return common, hosts


# (where, dotted path, field name the error must carry). where: "common" or "host".
TEXT_FIELDS = [
    ("common", "model.path", "model.path"),
    ("common", "model.served_name", "model.served_name"),
    ("common", "model.profile", "model.profile"),
    ("common", "chat_template", "chat_template"),
    ("common", "kv_cache_dtype", "kv_cache_dtype"),
    ("common", "prefill.0.transfer_backend", "prefill[0].transfer_backend"),
    ("common", "prefill.0.ib_device", "prefill[0].ib_device"),
    ("common", "decode.0.chat_template", "decode[0].chat_template"),
    ("common", "prefill.0.host", "prefill[0].host"),
    ("common", "router.host", "router.host"),
    ("common", "router.listen", "router.listen"),
    ("common", "router.prometheus_listen", "router.prometheus_listen"),
    ("common", "router.policy", "router.policy"),
    ("common", "router.health_check.endpoint", "router.health_check.endpoint"),
    ("common", "api_key.file", "api_key.file"),
    ("common", "topology", "topology"),
    ("host", "install_root", "install_root"),
    ("host", "service_user", "service_user"),
    ("host", "listen", "listen"),
    ("host", "sglang_version", "sglang_version"),
    ("host", "service_manager", "service_manager"),
]
# Values that reach only a serve script, shell-quoted: accepted as data (and proven inert), or refused.
DATA_FIELDS = [
    ("common", "prefill.0.env.A", "prefill[0].env"),
    ("common", "server_env.B", "server_env"),
    ("common", "prefill.0.extra_args.0", "prefill[0].extra_args"),
    ("common", "router.extra_args", "router.extra_args"),
    # An experiment's switches: shell-quoted data like server_env.
    ("common", "server_env_extra.C", "server_env_extra"),
    ("common", "server_env_extra_by_role.prefill.D", "server_env_extra_by_role.prefill"),
]
# Broken structure and numbers: (path, value, field).
BROKEN = [
    ("prefill.0.port", 0, "prefill[0].port"), ("prefill.0.port", 70000, "prefill[0].port"),
    ("prefill.0.port", "x", "prefill[0].port"), ("decode.0.port", 30001, "decode[0].port"),
    ("router.port", -1, "router.port"), ("prefill.0.bootstrap_port", 30002, "decode[0].port"),
    ("decode.0.gpus", [3, 4, 5, 6], "decode[0].gpus"), ("decode.0.gpus", [4, 4, 5, 6], "decode[0].gpus"),
    ("decode.0.gpus", [-1, 4, 5, 6], "decode[0].gpus"), ("decode.0.gpus", [], "decode[0].gpus"),
    ("decode.0.gpus", [8, 9, 10, 11], "decode[0].gpus"), ("decode.0.gpus", "4,5,6,7", "decode[0].gpus"),
    ("decode.0.tp_size", 3, "decode[0].tp_size"), ("decode.0.tp_size", 0, "decode[0].tp_size"),
    ("decode.0.mem_fraction_static", 0, "decode[0].mem_fraction_static"),
    ("decode.0.mem_fraction_static", 1.5, "decode[0].mem_fraction_static"),
    ("decode.0.mem_fraction_static", -0.2, "decode[0].mem_fraction_static"),
    ("decode.0.mem_fraction_static", "nan", "decode[0].mem_fraction_static"),
    ("index_topk", 100, "index_topk"), ("index_topk", "many", "index_topk"),
    ("decode.0.index_topk", 2048, "decode[0].index_topk"),
    ("model", "just a string", "model"), ("model.surprise", 1, "model.surprise"),
    ("prefill.0.surprise", 1, "prefill[0].surprise"), ("router.retry.max_retries", -1, "router.retry.max_retries"),
    ("router.circuit_breaker", [], "router.circuit_breaker"), ("server_env", ["A=1"], "server_env"),
    ("server_env.BAD-NAME", "1", "server_env"), ("prefill.0.env.1X", "1", "prefill[0].env"),
    ("prefill.0.extra_args", "--x", "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--api-key=sk"], "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--port", "1"], "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--cuda-graph-max-bs", "8"], "prefill[0].extra_args"),
    # Secret-looking flags (any case, --flag=value too) would land in 0644/0755 files.
    ("prefill.0.extra_args", ["--admin-api-key", "SECRET"], "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--Admin-API-Key=SECRET"], "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--hf-token", "hf_x"], "prefill[0].extra_args"),
    ("prefill.0.extra_args", ["--ssl-keyfile-password=pw"], "prefill[0].extra_args"),
    ("decode.0.extra_args", ["--jwt_secret", "s"], "decode[0].extra_args"),
    ("router.extra_args", ["--control-plane-api-keys", "k1:a:admin:s"], "router.extra_args"),
    ("prefill.0.extra_args", ["--max-total-tokens", "4096"], None),  # a count, not a secret
    ("router.extra_args", ["--tls-key-path", "/etc/tls/key.pem"], None),  # where a secret is kept
    ("api_key", {"file": "/k", "vault_var": "v"}, "api_key"), ("api_key", {"vault_var": "a-b"}, "api_key.vault_var"),
    ("api_key", {"file": "relative/key"}, "api_key.file"),
    ("router.listen", "0.0.0.0", None),  # with the key: accepted
    ("server_launcher", [], "server_launcher"), ("gpu_query_command", "nvidia-smi", "gpu_query_command"),
    ("memory_profile", {"deepseek-v4-flash": "huge"}, "memory_profile"), ("topology", "mesh", "topology"),
    ("combined", {"host": "gpu1"}, "combined"),
]
HOST_BROKEN = [
    ("install_root", "/", "install_root"), ("install_root", "relative/root", "install_root"),
    ("install_root", "/opt/../etc", "install_root"), ("install_root", "/opt", "install_root"),
    ("install_root", "/usr/local", "install_root"), ("install_root", "/opt/dsv4/", "install_root"),
    ("install_root", "/opt/" + "x" * 120, "install_root"), ("install_root", 5, "install_root"),
    ("install_root", "/home/alice", "install_root"), ("install_root", "/root/dsv4", "install_root"),
    ("install_root", "/usr/local/lib", "install_root"), ("install_root", "/var/lib/docker/dsv4", "install_root"),
    ("install_root", "/opt/dsv4deploy/slot-b", "install_root"),  # another's slot
    ("service_user", "sglang\\", "service_user"), ("service_user", "", "service_user"),
    ("service_user", "-rf", "service_user"), ("service_user", "root", "service_user"),
    ("gpu_count", -1, "gpu_count"),
    ("gpu_memory_gib", 0, "gpu_memory_gib"), ("sglang_version", "9.9.9", "sglang_version"),
    ("sglang_version", "0.5.12", None), ("listen", "0.0.0.0", None), ("listen", "localhost", "listen"),
    ("surprise_key_is_ignored_as_host_var", 1, None),
]


def put(data: dict[str, Any], dotted: str, value: Any) -> None:
    node: Any = data
    *parents, last = dotted.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def outcome(common: dict[str, Any], hosts: dict[str, dict[str, Any]]) -> list[str] | None:
    """The problems of the spec (None when valid); any exception but SpecError fails the test."""
    try:
        spec = load_spec(common, hosts)
        make_plan(spec, sorted(hosts))  # memory check, then renders every host: nothing else may raise
    except SpecError as err:
        assert err.problems and all(p.field and p.fix for p in err.problems)
        return [str(p) for p in err.problems]
    return None


def named(problems: list[str], field: str) -> bool:
    return any(p.startswith(field) for p in problems)


@pytest.fixture(autouse=True)
def no_canary() -> None:
    Path(CANARY).unlink(missing_ok=True)
    yield
    assert not Path(CANARY).exists(), "a hostile value was executed"


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(("where", "path", "field"), TEXT_FIELDS, ids=[f[1] for f in TEXT_FIELDS])
def test_hostile_text_is_refused_naming_the_field(where: str, path: str, field: str, value: str) -> None:
    common, hosts = base()
    put(common if where == "common" else hosts["gpu1"], path, value)
    problems = outcome(common, hosts)
    if problems is None:
        # '..' and absolute paths are plain path text: fine for a model path or a name, never for the root.
        assert value in ("../../etc", "/etc/passwd") and field not in ("install_root",) and where == "common", \
            f"{path}={value!r} was accepted"
        return
    assert named(problems, field), problems


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(("where", "path", "field"), DATA_FIELDS, ids=[f[1] for f in DATA_FIELDS])
def test_hostile_data_is_refused_or_passed_through_unchanged(tmp_path: Path, where: str, path: str, field: str,
                                                             value: str) -> None:
    common, hosts = base()
    printer = [sys.executable, "-c", "import os,sys,json; print(json.dumps([sys.argv[1:], dict(os.environ)]))"]
    common["server_launcher"] = printer
    common["router_launcher"] = printer
    put(common, path, [value] if path == "router.extra_args" else value)
    problems = outcome(common, hosts)
    if problems is not None:
        assert named(problems, field), problems
        return
    spec = load_spec(common, hosts)
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    for rel, text in render_all(spec)["gpu1"].items():
        if not rel.startswith("bin/"):
            continue
        script = tmp_path / Path(rel).name
        script.write_text(text.replace("cd /opt/dsv4deploy/current", f"cd {tmp_path}")
                          .replace("/etc/dsv4deploy/api_key", str(key)))
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        argv, env = json.loads(proc.stdout)
        if ("prefill" in rel and "prefill" in path) or ("router" in rel and "router" in path):
            assert value in argv or value in env.values()
        if path == "server_env.B" and "router" not in rel:
            assert env["B"] == value
        if path == "server_env_extra.C" and "router" not in rel:
            assert env["C"] == value and env["B"] == "2"  # added on top of server_env, which stays


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("path", ["server_env.HF_TOKEN", "server_env_extra.HF_TOKEN", "prefill.0.env.HF_TOKEN",
                                  "server_env_extra_by_role.prefill.HF_TOKEN"])
def test_hostile_secret_values_never_reach_a_release_and_reach_the_server_unchanged(tmp_path: Path, path: str,
                                                                                    value: str) -> None:
    # A secret is refused (a control character) or lands only in the env file, read back exact.
    from dsv4deploy.plan import secret_files

    common, hosts = base()
    common["server_launcher"] = [sys.executable, "-c", "import os,json; print(json.dumps(dict(os.environ)))"]
    put(common, path, value)
    problems = outcome(common, hosts)
    if problems is not None:
        assert named(problems, path.replace(".0.", "[0].")), problems
        assert "control character" in " ".join(problems)
        return
    spec = load_spec(common, hosts)
    files = render_all(spec, {"gpu1": "0f" * 32})["gpu1"]
    if len(value.strip()) >= 4:  # a short value is a substring of anything
        assert not [rel for rel, text in files.items() if value in text]
        assert value not in json.dumps(make_plan(spec, ["gpu1"], keys={"gpu1": "0f" * 32}))
    # Its unsalted digest, which a reader could match guesses against, is in no file either.
    unsalted = hashlib.sha256(value.encode()).hexdigest()[:12]
    assert not [rel for rel, text in files.items() if unsalted in text]
    env_file = next(p for p in secret_files(spec, ["gpu1"])["gpu1"] if p.endswith("-prefill.env"))
    local = tmp_path / "prefill.env"
    local.write_text(secret_files(spec, ["gpu1"])["gpu1"][env_file])
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    script = tmp_path / "serve.sh"
    script.write_text(files["bin/serve-sglang-dsv4-prefill.sh"].replace(env_file, str(local))
                      .replace("cd /opt/dsv4deploy/current", f"cd {tmp_path}")
                      .replace("/etc/dsv4deploy/api_key", str(key)))
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["HF_TOKEN"] == value
    assert not Path(CANARY).exists()


def _typos(name: str) -> list[str]:
    """Misspellings a person makes: two neighbours swapped, a letter dropped or doubled, an extra '_'."""
    out = {name[:i] + name[i + 1] + name[i] + name[i + 2:] for i in range(len(name) - 1) if name[i] != name[i + 1]}
    out |= {name[:i] + name[i + 1:] for i in range(1, len(name))}
    out |= {name[:i] + name[i] + name[i:] for i in range(len(name))}
    out |= {name[:i] + "_" + name[i:] for i in range(1, len(name)) if "_" not in name[i - 1:i + 1]}
    return sorted(out - {name})


SPEC_NAMES = sorted(n for n in (*DEPLOYMENT_KEYS, *HOST_KEYS) if len(n) >= 8)
TYPOS = [(name, typo) for name in SPEC_NAMES for typo in _typos(name)]


@pytest.mark.parametrize(("name", "typo"), TYPOS, ids=[t for _, t in TYPOS])
def test_every_near_miss_of_a_spec_variable_is_refused_with_did_you_mean(name: str, typo: str) -> None:
    # Each one used to pass silently and deploy the default instead.
    from dsv4deploy.inventory.varnames import known_names, misspelt

    if typo in known_names():  # another real name (e.g. dropping a letter of a longer one)
        return
    problems = [str(p) for p in misspelt({typo: ["group_vars/all/x.yml"]})]
    assert len(problems) == 1 and problems[0].startswith(f"{typo}: is not a variable dsv4deploy reads (set in "
                                                         "group_vars/all/x.yml); fix: did you mean "), problems
    assert f"did you mean {name}?" in problems[0], problems


@pytest.mark.parametrize(("path", "value", "field"), BROKEN, ids=[f"{b[0]}={b[1]!r}" for b in BROKEN])
def test_broken_values_are_refused_naming_the_field(path: str, value: Any, field: str | None) -> None:
    common, hosts = base()
    put(common, path, value)
    problems = outcome(common, hosts)
    if field is None:
        assert problems is None, problems
    else:
        assert problems is not None and named(problems, field), problems


@pytest.mark.parametrize(("key", "value", "field"), HOST_BROKEN, ids=[f"{b[0]}={b[1]!r}" for b in HOST_BROKEN])
def test_broken_host_settings_are_refused_naming_field_and_host(key: str, value: Any, field: str | None) -> None:
    common, hosts = base()
    hosts["gpu1"][key] = value
    problems = outcome(common, hosts)
    if field is None:
        assert problems is None, problems
    else:
        assert problems is not None and any(p.startswith(f"{field} (host gpu1)") for p in problems), problems


@pytest.mark.parametrize("name", ["gpu1\ntouch /tmp/x", "../../x", "/abs/host", "..", ".hidden", "a b", "a;b"])
def test_hostile_inventory_host_names_are_refused(name: str) -> None:
    common, hosts = base()
    hosts = {name: hosts["gpu1"]}
    for role in ("prefill", "decode"):
        common[role][0]["host"] = name
    common["router"]["host"] = name
    problems = outcome(common, hosts)
    assert problems is not None and any(p.startswith("inventory host name") for p in problems), problems


def test_wildcard_listeners_need_a_key_and_metrics_stay_on_loopback() -> None:
    common, hosts = base()
    del common["api_key"]
    common["router"]["listen"] = "0.0.0.0"
    hosts["gpu1"]["listen"] = "::"
    problems = outcome(common, hosts) or []
    assert any(p.startswith("router.listen (host gpu1): 0.0.0.0 is reachable") for p in problems), problems
    assert any(p.startswith("listen (host gpu1): :: is reachable") for p in problems), problems
    common, hosts = base()
    common["router"]["listen"] = "0.0.0.0"
    spec = load_spec(common, hosts)
    script = render_all(spec)["gpu1"]["bin/serve-sglang-dsv4-router.sh"]
    assert "--host 0.0.0.0" in script and "--prometheus-host 127.0.0.1" in script


def test_render_out_never_writes_outside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for host in ("../../escaped", "/abs", "..", ""):
        with pytest.raises(cli.CliError):
            cli.write_files({host: {"spec.json": "{}\n"}}, out)
    assert not (tmp_path / "escaped").exists() and not Path("/abs").exists()


# -- property-based fuzzing ----------------------------------------------------------------------

NASTY_TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12))
ANY_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True), NASTY_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NASTY_TEXT, inner, max_size=3)),
    max_leaves=6,
)
COMMON_PATHS = [path for _, path, _ in TEXT_FIELDS + DATA_FIELDS if _ == "common"] + [b[0] for b in BROKEN]
HOST_KEYS = ["install_root", "service_user", "listen", "sglang_version", "service_manager", "gpu_count",
             "gpu_memory_gib"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(COMMON_PATHS), ANY_VALUE), max_size=3),
       host_changes=st.lists(st.tuples(st.sampled_from(HOST_KEYS), ANY_VALUE), max_size=2))
def test_fuzzed_specs_end_in_a_named_error_or_a_sound_release(changes: list[tuple[str, Any]],
                                                               host_changes: list[tuple[str, Any]]) -> None:
    common, hosts = base()
    for path, value in changes:
        try:
            put(common, path, copy.deepcopy(value))
        except (TypeError, KeyError, IndexError, AttributeError, ValueError):
            continue  # the path no longer exists after an earlier change replaced its parent
    for key, value in host_changes:
        hosts["gpu1"][key] = copy.deepcopy(value)
    outcome(common, hosts)
