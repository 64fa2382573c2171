"""What an operator has on a host before deploying inventory/examples/pd-single-host to it."""

from __future__ import annotations

from tests.systemd.hostkit import Host

KEY_FILE = "/etc/dsv4deploy/api_key"
MODEL_DIR = "/models/DeepSeek-V4-Flash-NVFP4"


def prepare(host: Host, key: str) -> None:
    """The API key file (the service user's only, as the example expects) and the model folder with
    its chat template (the simulator does not read them; sglang would)."""
    host.write_file(KEY_FILE, f"{key}\n", owner="sglang", mode="0400")
    host.sh(f"install -d -m 0755 {MODEL_DIR} && printf '{{}}' > {MODEL_DIR}/chat_template.jinja")
