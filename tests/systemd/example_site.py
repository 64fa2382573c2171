"""What an operator has on a host before deploying inventory/examples/pd-single-host to it."""

from __future__ import annotations

import yaml

from tests.systemd.hostkit import REPO, Host

KEY_FILE = "/etc/dsv4deploy/api_key"
MODEL_DIR = "/models/DeepSeek-V4-Flash-NVFP4"
# A checkpoint's files without its weights (the simulator loads none; preflight reads these).
STAND_IN = REPO / "inventory" / "local" / ".model"


def prepare(host: Host, key: str, model_dir: str = MODEL_DIR) -> None:
    """The API key file (the service user's only, as the example expects) and the model folder with
    its config, tokenizer, weights' index and chat template (preflight reads them; the simulator does not)."""
    host.write_file(KEY_FILE, f"{key}\n", owner="sglang", mode="0400")
    install_model(host, model_dir)


def install_model(host: Host, model_dir: str = MODEL_DIR) -> None:
    """The model folder an example names (`model_dir`), with a checkpoint's files but no weights (preflight
    reads them)."""
    host.sh(f"install -d -m 0755 {model_dir}")
    for source in sorted(STAND_IN.iterdir()):
        host.write_file(f"{model_dir}/{source.name}", source.read_text(encoding="utf-8"), mode="0644")


def rollout_block(example: str) -> dict:
    """The deployment lines an example shows commented out for its second hosts (its `dsv4_rollout_*` lines),
    uncommented as its comment says."""
    text = (REPO / "inventory" / "examples" / example / "group_vars" / "all" / "deployment.yml").read_text()
    lines = [line.removeprefix("# ") for line in text.splitlines() if line.startswith("# dsv4_rollout_")]
    block = yaml.safe_load("\n".join(lines))
    assert block and block["dsv4_rollout_strategy"] == "blue_green_hosts", lines
    return block
