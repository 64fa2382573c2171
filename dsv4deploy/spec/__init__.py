"""The typed deployment spec: one model for a DeepSeek-V4-Flash deployment on SGLang.

The spec is read from Ansible variables (inventory plus `-e`), so the playbooks and the CLI agree.
`load_spec` turns variables into a validated `Deployment` or raises `SpecError`, whose problems each
name the field, the host and the fix. Structural checks (types, ranges, unknown keys) come from
pydantic; cross-field checks (GPU overlap, port clashes, prefill/decode agreement, version support)
are in `check_deployment`.

This module is the spec's one import point; the code lives by job in
- `dsv4deploy.spec.models`: the models, `Problem` and `SpecError`, the variable names they read;
- `dsv4deploy.spec.load`: `load_spec` and pydantic's errors told as problems;
- `dsv4deploy.spec.checks`: `check_deployment` and the cross-field checks;
- `dsv4deploy.spec.values`: checks of values written onto hosts (env names, text, paths, users, listeners).
"""

from __future__ import annotations

from dsv4deploy.spec.checks import (
    FORBIDDEN_FLAG_REPLACEMENTS,
    PORT_FIX,
    RENDERED_ROUTER_FLAGS,
    RENDERED_SERVER_FLAGS,
    ROUTER_DEFAULT_PROMETHEUS_PORT,
    TP_SIZES,
    check_deployment,
)
from dsv4deploy.spec.load import load_spec
from dsv4deploy.spec.models import (
    DEPLOYMENT_KEYS,
    HOST_KEYS,
    MODEL_AFFECTING,
    ApiKeyRef,
    CircuitBreakerSpec,
    CombinedSpec,
    CudaGraphSpec,
    DecodeSpec,
    Deployment,
    EnvMap,
    Fraction,
    HealthCheckSpec,
    HostSpec,
    ModelSettings,
    ModelSpec,
    Port,
    PrefillSpec,
    Problem,
    RetrySpec,
    RouterSpec,
    SpecError,
    StrictModel,
    WorkerSpec,
)
from dsv4deploy.spec.values import (
    CONTROL,
    ENV_NAME,
    HOST_NAME,
    INSTALL_ROOT,
    NAME_FIELDS,
    PATH_FIELDS,
    PLAIN_TEXT,
    SHELL_ONLY,
    SOCKET_PATH_MAX,
    SUPERVISOR_SOCKET,
    SYSTEM_DIRS,
    SYSTEM_TOPS,
    USER_NAME,
    VAR_NAME,
    check_values,
    install_root_problems,
)

__all__ = [
    "CONTROL",
    "DEPLOYMENT_KEYS",
    "ENV_NAME",
    "FORBIDDEN_FLAG_REPLACEMENTS",
    "HOST_KEYS",
    "HOST_NAME",
    "INSTALL_ROOT",
    "MODEL_AFFECTING",
    "NAME_FIELDS",
    "PATH_FIELDS",
    "PLAIN_TEXT",
    "PORT_FIX",
    "RENDERED_ROUTER_FLAGS",
    "RENDERED_SERVER_FLAGS",
    "ROUTER_DEFAULT_PROMETHEUS_PORT",
    "SHELL_ONLY",
    "SOCKET_PATH_MAX",
    "SUPERVISOR_SOCKET",
    "SYSTEM_DIRS",
    "SYSTEM_TOPS",
    "TP_SIZES",
    "USER_NAME",
    "VAR_NAME",
    "ApiKeyRef",
    "CircuitBreakerSpec",
    "CombinedSpec",
    "CudaGraphSpec",
    "DecodeSpec",
    "Deployment",
    "EnvMap",
    "Fraction",
    "HealthCheckSpec",
    "HostSpec",
    "ModelSettings",
    "ModelSpec",
    "Port",
    "PrefillSpec",
    "Problem",
    "RetrySpec",
    "RouterSpec",
    "SpecError",
    "StrictModel",
    "WorkerSpec",
    "check_deployment",
    "check_values",
    "install_root_problems",
    "load_spec",
]
