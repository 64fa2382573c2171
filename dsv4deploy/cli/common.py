"""What every `dsv4deploy` subcommand shares: exit codes, the bad-input error, and the deployment
loaded from an Ansible inventory and checked as the deploy's plan checks it."""

from __future__ import annotations

from pathlib import Path

from dsv4deploy import PACKAGE_DIR
from dsv4deploy.inventory import InventoryError, deployment_from_inventory
from dsv4deploy.plan.memory import WorkerMemory, check_memory, problems_from_memory
from dsv4deploy.spec import Deployment, SpecError

EXIT_OK = 0
EXIT_HOST_FAILED = 1
EXIT_BAD_INPUT = 2
# What a shell reports for a command killed by SIGPIPE (128 + 13): `dsv4deploy plan | head` ends so, quietly.
EXIT_BROKEN_PIPE = 141


class CliError(Exception):
    """Bad input: `lines` are printed one per line and the command exits 2."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__("\n".join(lines))


def default_inventory() -> list[str]:
    """The inventory `ansible-playbook` would read here: ansible.cfg's (cwd or ANSIBLE_CONFIG), else the
    repository's inventory/local beside this package."""
    from ansible import constants as C

    if C.CONFIG_FILE and C.DEFAULT_HOST_LIST and all(Path(p).exists() for p in C.DEFAULT_HOST_LIST):
        return [str(p) for p in C.DEFAULT_HOST_LIST]
    repo_local = PACKAGE_DIR.parent / "inventory" / "local"
    if repo_local.is_dir():
        return [str(repo_local)]
    raise CliError(["no inventory given and no ansible.cfg naming one here; fix: pass -i INVENTORY"])


def load_deployment(inventories: list[str] | None, extra_vars: list[str] | None,
                    check_fit: bool = True) -> tuple[Deployment, list[WorkerMemory]]:
    """The validated spec and its memory report; CliError listing every problem otherwise.

    The gates' variables are checked as the deploy's plan checks them (unknown names, bad values, a
    needle grid that cannot reach its requirement), and so are the rollout's (`dsv4_rollout_*`: a
    blue_green that cannot fit beside the serving release). With `check_fit`, a server that does not
    fit its GPUs is a problem too (as in preflight).
    """
    spec, reports, _ = load_with_rollout(inventories, extra_vars, check_fit)
    return spec, reports


def load_with_rollout(inventories: list[str] | None, extra_vars: list[str] | None,
          check_fit: bool) -> tuple[Deployment, list[WorkerMemory], dict]:
    """load_deployment, and the plan's rollout part (dsv4deploy.rollout.strategy.rollout_plan)."""
    from dsv4deploy.gates.runner import GATE_VAR_PREFIXES, GateSettingsError, settings_from_vars
    from dsv4deploy.rollout.settings import load_rollout
    from dsv4deploy.rollout.strategy import rollout_plan

    try:
        spec, gate_vars = deployment_from_inventory(inventories or default_inventory(), extra_vars or [],
                                                    (*GATE_VAR_PREFIXES, "dsv4_rollout_"))
        reports = check_memory(spec)
        rollout = rollout_plan(spec, load_rollout(gate_vars))
    except SpecError as exc:
        raise CliError([str(p) for p in exc.problems]) from None
    except InventoryError as exc:
        raise CliError([str(exc)]) from None
    try:
        settings_from_vars(gate_vars, lambda value: value, None, spec_index_topk(spec))
    except GateSettingsError as exc:
        raise CliError(exc.problems) from None
    if check_fit and (problems := problems_from_memory(reports)):
        raise CliError([str(p) for p in problems])
    return spec, reports, rollout


def spec_index_topk(spec: Deployment) -> int | None:
    """The smallest index_topk a server of `spec` runs with (None: the model's default), as the plan reads it."""
    from dsv4deploy.gates.runner import plan_index_topk
    from dsv4deploy.plan import gate_targets

    return plan_index_topk(gate_targets(spec))
