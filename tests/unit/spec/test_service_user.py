"""Root as the service user only when meant (service_user_root_ok: true)."""

from __future__ import annotations

import pytest

from dsv4deploy.spec import SpecError, load_spec
from tests.unit.spec.test_hostile_spec import base


def test_root_as_the_service_user_is_refused_naming_the_switch() -> None:
    common, hosts = base()
    hosts["gpu1"]["service_user"] = "root"
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = err.value.problems
    assert (problem.field, problem.host) == ("service_user", "gpu1")
    assert "service_user_root_ok: true" in problem.fix


@pytest.mark.parametrize("ok", [True, "true"])
def test_root_is_accepted_when_meant_and_changes_no_release(ok: object) -> None:
    common, hosts = base()
    before = load_spec(common, hosts).model_dump(mode="json")
    hosts["gpu1"].update(service_user="root", service_user_root_ok=ok)
    spec = load_spec(common, hosts)
    assert spec.host("gpu1").service_user == "root"
    # The switch is not part of spec.json (so turning it on alone changes no release id).
    assert "service_user_root_ok" not in spec.model_dump(mode="json")["hosts"]["gpu1"]
    assert before["hosts"]["gpu1"].keys() == spec.model_dump(mode="json")["hosts"]["gpu1"].keys()
