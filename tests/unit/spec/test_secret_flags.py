"""A secret given as an extra_args flag is refused before it reaches any file."""

from __future__ import annotations

import pytest

from dsv4deploy.spec import SpecError, load_spec
from dsv4deploy.spec.secret_flags import is_secret_flag
from tests.unit.spec.test_hostile_spec import base


@pytest.mark.parametrize("arg", ["--admin-api-key", "--ADMIN-API-KEY=s", "--hf-token", "--hf_token=x", "--jwt-secret",
                                 "--db-password", "--oracle-passwd=x", "--control-plane-api-keys", "--apikey",
                                 "-token"])
def test_secret_looking_flags_are_recognised(arg: str) -> None:
    assert is_secret_flag(arg)


@pytest.mark.parametrize("arg", ["--max-total-tokens", "--tokenizer-path", "--tls-key-path", "--client-key-file",
                                 "--ssl-keyfile", "--keep-alive", "SECRET", "--kv-cache-dtype", "--monkey"])
def test_ordinary_flags_and_values_are_not(arg: str) -> None:
    assert not is_secret_flag(arg)


def test_an_admin_key_in_extra_args_is_refused_naming_the_secret_env_file() -> None:
    # Before: accepted, and "SECRET" was written into the 0755 serve script and the 0644 spec.json.
    common, hosts = base()
    common["prefill"][0]["extra_args"] = ["--enable-metrics", "--admin-api-key", "s3cr3t-value"]
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = [p for p in err.value.problems if "--admin-api-key" in p.message]
    assert problem.field == "prefill[0].extra_args" and problem.host == "gpu1"
    assert "<install_root>/secrets/<service>.env" in problem.fix and "s3cr3t-value" not in str(problem)


def test_the_api_key_flag_keeps_its_own_single_fix() -> None:
    common, hosts = base()
    common["prefill"][0]["extra_args"] = ["--api-key=sk"]
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    assert not [p for p in err.value.problems if "secrets/<service>.env" in p.fix]
    assert [p for p in err.value.problems if "api_key: {file: PATH}" in p.fix]


@pytest.mark.parametrize("args", [["--encoder-urls", "http://u:pw@enc:8000"], ["--encoder-urls=https://u:pw@enc"]])
def test_credentials_inside_a_url_are_refused_without_being_quoted(args: list[str]) -> None:
    common, hosts = base()
    common["prefill"][0]["extra_args"] = args
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = [p for p in err.value.problems if "user name and password" in p.message]
    assert problem.field == "prefill[0].extra_args" and "pw" not in problem.message.replace("password", "")


def test_a_url_without_credentials_passes() -> None:
    common, hosts = base()
    common["prefill"][0]["extra_args"] = ["--encoder-urls", "http://enc:8000/v1?x=a@b"]
    load_spec(common, hosts)


@pytest.mark.parametrize(("where", "field"), [
    ("server_env", "server_env.HTTPS_PROXY"),
    ("worker", "prefill[0].env.HTTPS_PROXY"),
    ("router", "router.env.HTTPS_PROXY"),
])
def test_credentials_inside_a_plain_env_url_are_refused_naming_the_field(where: str, field: str) -> None:
    # Before: accepted, and the proxy's password was written into the 0644 spec.json and the serve script.
    common, hosts = base()
    env = {"HTTPS_PROXY": "http://u:pw@proxy:3128"}
    if where == "server_env":
        common["server_env"] = env
    elif where == "worker":
        common["prefill"][0]["env"] = env
    else:
        common["router"]["env"] = env
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = [p for p in err.value.problems if "user name and password" in p.message]
    assert problem.field == field and "secret_env" in problem.fix
    assert "pw@" not in problem.message + problem.fix
    if where == "worker":
        assert problem.host == common["prefill"][0]["host"]


def test_a_url_with_credentials_in_a_secret_env_value_passes() -> None:
    # Listed in secret_env (or secret by name), the value goes only to the root-owned secret env file.
    common, hosts = base()
    common["server_env"] = {"HTTPS_PROXY": "http://u:pw@proxy:3128", "MIRROR_TOKEN": "https://u:pw@m"}
    common["secret_env"] = ["HTTPS_PROXY"]
    load_spec(common, hosts)
