#!/usr/bin/python
"""Read the deployment's API key file on a host for the gates, as root reads a secret: never through a link."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_api_key
short_description: Read the API key file for the gates without following a link
description:
  - Reads O(path) with C(O_NOFOLLOW) and checks the open file (a regular file, writable by its owner only, owned by
    root or O(owner), at most 4 KiB) before reading it; a FIFO, a device or a link planted there is refused with
    its path, owner and mode, and nothing is read.
  - "The whole result is hidden (no_log): the key is its RV(key)."
options:
  path:
    type: path
    required: true
    description: [The API key file (C(api_key.file), or C(INSTALL_ROOT/secrets/api_key)).]
  owner:
    type: str
    default: ""
    description: [The service user, who may own the file besides root; empty for root only.]
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Read the API key for the gates (never logged)
  dsv4.deploy.dsv4_api_key:
    path: /etc/dsv4deploy/api_key
    owner: sglang
  register: api_key
  no_log: true
"""

RETURN = r"""
key:
  description: The file's content, stripped.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import trust


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "owner": {"type": "str", "default": ""}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        key = trust.read_key(path, trust.owners_for(module.params["owner"]))
    except trust.Untrusted as exc:
        module.fail_json(msg=f"will not read the API key file: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg=f"cannot read the API key file {path}: {getattr(exc, 'strerror', None) or 'not text'}")
    module.exit_json(changed=False, key=key, _ansible_no_log=True)


if __name__ == "__main__":
    main()
