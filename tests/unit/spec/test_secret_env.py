"""Secret env values: in a 0600 env file read by the unit, never in a rendered file.

Each place the issue names is checked: the 0755 serve scripts, the 0644 spec.json, the units and programs,
the plan (a fact shown at -v, and what --diff compares: the release files), `dsv4deploy plan` and
`render`, and the report's source. The playbook side (file mode, owner, --diff and -vvv output, the
servers' real environment) is tests/integration/test_secrets.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dsv4deploy import cli
from dsv4deploy.plan import make_plan, secret_files
from dsv4deploy.plan.render import render_all
from dsv4deploy.spec import SpecError, load_spec, secret_env
from tests.golden.fixture_specs import PD_COMMON, host_vars, pd_spec

TOKEN = "hf_" + "Zq9" * 8
SALT = "5a" * 32  # a host's digest salt (64 hex, as dsv4_digest_salt keeps it)
KEYS = {"gpu1": SALT}
NASTY = 'it\'s "quoted" $HOME `id` \\ back; # not a comment'
REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "aws_secret_access_key", "MY_PASSWD",
                                  "GCP_CREDENTIALS"])
def test_secret_by_name(name: str) -> None:
    assert secret_env.is_secret(name)


@pytest.mark.parametrize("name", ["SGLANG_DSV4_BF16_INDEX_K", "CUDA_VISIBLE_DEVICES", "SGLANG_SM120_MMA_FLASHMLA",
                                  "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"])
def test_switches_are_not_secret(name: str) -> None:
    assert not secret_env.is_secret(name)


@pytest.mark.parametrize("manager", ["systemd", "supervisor"])
def test_no_rendered_file_holds_a_secret_value(manager: str) -> None:
    spec = pd_spec(manager, server_env={"HF_TOKEN": TOKEN, "A": "1"},
                   server_env_extra_by_role={"router": {"ROUTER_TOKEN": TOKEN + "r"}},
                   secret_env=["WANDB_ENTITY"], server_env_extra={"WANDB_ENTITY": "team-secret-name"})
    files = render_all(spec, KEYS)["gpu1"]
    for rel, text in files.items():
        assert TOKEN not in text and "team-secret-name" not in text, rel
    script = files["bin/serve-sglang-dsv4-decode.sh"]
    assert "export A=1" in script and "HF_TOKEN" in script  # the name is shown, the value never
    deployment = json.loads(files["spec.json"])["deployment"]
    assert deployment["server_env"]["HF_TOKEN"] == secret_env.redacted(TOKEN, SALT)
    assert deployment["server_env_extra"]["WANDB_ENTITY"].startswith("<secret hmac:")
    if manager == "systemd":
        assert "EnvironmentFile=/opt/dsv4deploy/secrets/sglang-dsv4-decode.env\n" in \
            files["units/sglang-dsv4-decode.service"]
        assert "EnvironmentFile=/opt/dsv4deploy/secrets/sglang-dsv4-router.env\n" in \
            files["units/sglang-dsv4-router.service"]
    else:
        assert "secret_env_file=/opt/dsv4deploy/secrets/sglang-dsv4-decode.env\n" in script


def test_the_plan_carries_no_value_and_only_the_secrets_task_gets_values() -> None:
    spec = pd_spec(server_env={"HF_TOKEN": TOKEN})
    plan = make_plan(spec, ["gpu1"], keys=KEYS)
    assert TOKEN not in json.dumps(plan)
    assert plan["spec"]["server_env"]["HF_TOKEN"] == "<secret>"  # the plan's own spec (and the report): no digest
    files = secret_files(spec, ["gpu1"])["gpu1"]
    assert sorted(files) == ["/opt/dsv4deploy/secrets/sglang-dsv4-decode.env",
                             "/opt/dsv4deploy/secrets/sglang-dsv4-prefill.env"]
    assert files["/opt/dsv4deploy/secrets/sglang-dsv4-decode.env"] == f'HF_TOKEN="{TOKEN}"\n'


def test_a_changed_secret_changes_the_release_so_its_servers_restart() -> None:
    one, two = (make_plan(pd_spec(server_env={"HF_TOKEN": t}), ["gpu1"], keys=KEYS) for t in (TOKEN, TOKEN + "2"))
    assert one["hosts"]["gpu1"]["content_hash"] != two["hosts"]["gpu1"]["content_hash"]
    again = make_plan(pd_spec(server_env={"HF_TOKEN": TOKEN}), ["gpu1"], keys=KEYS)  # the next run, same salt
    assert again["hosts"]["gpu1"]["content_hash"] == one["hosts"]["gpu1"]["content_hash"]


def test_a_guessed_secret_cannot_be_confirmed_from_a_release() -> None:
    # spec.json (0644) and the serve scripts showed 12 hex of an unsalted sha256, so a reader
    # could hash a dictionary of weak secrets and find the one that matches. Now the digest is keyed by the
    # host's salt, which the reader (without the 0700 secrets folder) does not have.
    weak = "password1"
    files = render_all(pd_spec(server_env={"HF_TOKEN": weak}), KEYS)["gpu1"]
    shown = "".join(files.values())
    unsalted = hashlib.sha256(weak.encode()).hexdigest()[:12]
    assert unsalted not in shown
    env_line = secret_env.file_content({"HF_TOKEN": weak})
    assert hashlib.sha256(env_line.encode()).hexdigest()[:12] not in shown  # the serve script's old digest
    guesses = {hashlib.sha256(g.encode()).hexdigest()[:12] for g in ("123456", "password", weak, "letmein")}
    assert not any(g in shown for g in guesses)
    assert secret_env.keyed_digest(weak, SALT) in shown  # what the host with its salt can still compare


def test_one_hosts_digest_says_nothing_about_anothers() -> None:
    spec = pd_spec(server_env={"HF_TOKEN": TOKEN})
    one, two = (json.loads(render_all(spec, {"gpu1": salt})["gpu1"]["spec.json"])["deployment"]["server_env"]
                for salt in (SALT, "c3" * 32))
    assert one["HF_TOKEN"] != two["HF_TOKEN"]


def test_a_host_with_secrets_and_no_salt_is_refused_before_anything_changes() -> None:
    # A release without a digest would not change when its secret does: the plan refuses to make one.
    with pytest.raises(SpecError) as err:
        make_plan(pd_spec(server_env={"HF_TOKEN": TOKEN}), ["gpu1"], keys={})
    assert "server_env (host gpu1): the host's digest salt was not read" in str(err.value)
    with pytest.raises(SpecError):  # an API key is a secret too: its digest is keyed with the salt
        make_plan(pd_spec(), ["gpu1"], keys={})
    make_plan(_keyless(), ["gpu1"], keys={})  # no secret, no salt needed


def _keyless() -> object:
    """The PD fixture on loopback with no API key (and so no secret at all)."""
    data = {**PD_COMMON, "api_key": None, "router": {**PD_COMMON["router"], "listen": "127.0.0.1"}}
    return load_spec(data, {"gpu1": host_vars(listen="127.0.0.1")})


def _identity(spec_kw: dict, key: str | None) -> str:
    digests = None if key is None else {"gpu1": secret_env.api_key_digest(key, SALT)}
    return make_plan(pd_spec(**spec_kw), ["gpu1"], keys={"gpu1": SALT}, api_key_digests=digests,
                     now=0)["hosts"]["gpu1"]["content_hash"]


@pytest.mark.parametrize("ref", [{"file": "/etc/dsv4deploy/api_key"}, {"vault_var": "vault_dsv4_api_key"}])
def test_a_rotated_api_key_is_a_new_release_and_the_same_key_the_same(ref: dict) -> None:
    old, new = "sk-old-" + TOKEN, "sk-new-" + TOKEN
    kw = {"api_key": ref}
    assert _identity(kw, old) == _identity(kw, old + "\n")  # the serve script drops trailing newlines
    assert _identity(kw, old) != _identity(kw, new)
    files = render_all(pd_spec(**kw), {"gpu1": SALT}, {"gpu1": secret_env.api_key_digest(new, SALT)})["gpu1"]
    scripts = {path: text for path, text in files.items() if path.startswith("bin/")}
    assert scripts and all(f"hmac {secret_env.keyed_digest(new, SALT)}" in t for t in scripts.values())
    assert not any(new in t for t in files.values())


def test_without_a_key_digest_the_release_is_as_before() -> None:
    # No digest (a plan on the controller alone): the serve scripts say nothing of the key's content.
    files = render_all(pd_spec(), {"gpu1": SALT})["gpu1"]
    assert not any("hmac" in t and "key's content" in t for t in files.values())


def test_secret_values_are_found_again_from_keyed_unsalted_and_plain_redactions() -> None:
    # The isolation twin comes from a release's spec.json: keyed (this version) or unsalted (an older one);
    # the other slot's plan shows `<secret>`, taken by name and place.
    spec = pd_spec(server_env={"HF_TOKEN": TOKEN}, server_env_extra_by_role={"router": {"R_TOKEN": "r" + TOKEN}})
    dump = spec.model_dump(mode="json")
    legacy = json.loads(json.dumps(secret_env.redact_spec(dump, SALT)).replace(
        secret_env.redacted(TOKEN, SALT), "<secret sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()[:12] + ">"))
    for redacted in (secret_env.redact_spec(dump, SALT), secret_env.redact_spec(dump), legacy):
        data, missing = secret_env.unredact_spec(redacted, dump, [SALT])
        assert missing == [] and data["server_env"]["HF_TOKEN"] == TOKEN
        assert data["server_env_extra_by_role"]["router"]["R_TOKEN"] == "r" + TOKEN
    _, missing = secret_env.unredact_spec(secret_env.redact_spec(dump, "c3" * 32), dump, [SALT])
    assert missing == ["HF_TOKEN", "R_TOKEN"]  # another salt: not this inventory's values, so refused


def test_the_env_file_reads_back_exactly_in_bash(tmp_path: Path) -> None:
    # systemd's EnvironmentFile= reads "..." with the same four escapes (" \\ ` $) as bash.
    path = tmp_path / "x.env"
    path.write_text(secret_env.file_content({"HF_TOKEN": NASTY}))
    out = subprocess.run(["bash", "-c", f'set -a; . {path}; printf %s "$HF_TOKEN"'], capture_output=True, text=True,
                         check=True, env={"PATH": os.environ["PATH"]})
    assert out.stdout == NASTY


def test_a_secret_value_with_a_newline_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        pd_spec(server_env={"HF_TOKEN": "a\nb"})
    assert str(err.value) == ("server_env.HF_TOKEN: a secret value contains a control character (newline, tab, ...); "
                              "fix: remove it; secret values are written one per line into the host's env file")


def test_plan_and_render_commands_never_print_or_write_it(capsys, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site)
    extra = json.dumps({"server_env_extra": {"HF_TOKEN": TOKEN}})
    for command in (["plan"], ["plan", "--json"], ["validate"], ["render", "--out", str(tmp_path / "out")]):
        assert cli.main([*command, "-i", str(site), "-e", extra]) == 0
        out, err = capsys.readouterr()
        assert TOKEN not in out + err, command
    assert "  all servers: HF_TOKEN=<secret>" in "\n".join(cli.format_plan(cli.plan([str(site)], [extra])))
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written and all(TOKEN.encode() not in p.read_bytes() for p in written)


def test_the_salt_is_read_only_on_the_hosts_with_secret_env_values() -> None:
    from dsv4deploy.plan import secret_hosts

    assert secret_hosts(pd_spec(server_env={"HF_TOKEN": TOKEN}), ["gpu1"]) == {"gpu1": "/opt/dsv4deploy"}
    assert secret_hosts(_keyless(), ["gpu1"]) == {}  # a deploy without any reads nothing on the hosts
    assert secret_hosts(pd_spec(), ["gpu1"]) == {"gpu1": "/opt/dsv4deploy"}  # the API key's digest is keyed too
