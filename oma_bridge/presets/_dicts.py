"""A whole ``AgentConfig`` from a dict or decoded JSON, backend included.

It lives here, above both transports, because building the backend means
choosing ``ProcessBackendConfig`` or ``AcpBackendConfig`` (or a preset): the
bridge, below them, never imports a concrete backend. Plain type checks, no
pydantic: the configs check their own fields when they are made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._presets import PRESETS, preset
from ._recipe import REGISTRY_PREFIX

if TYPE_CHECKING:
    from ..acp import AcpBackendConfig
    from ..backends import ProcessBackendConfig
    from ..bridge import AgentConfig

__all__ = ("agent_config_from_dict",)

_KEYS = ("backend", "name", "system_prompt")
_TRANSPORTS = ("process", "acp")


def agent_config_from_dict(data: Mapping[str, object]) -> AgentConfig:
    """An ``AgentConfig`` from a mapping such as decoded JSON or TOML.

    ``data["backend"]`` is a preset's name (``"claude"``, ``"registry:ID"``),
    or a mapping: ``{"preset": NAME, ...options}`` or ``{"transport":
    "process" | "acp", "command": ..., ...}``, the other keys being fields of
    the backend config. ``name`` defaults to the preset's name or the
    command's; ``system_prompt`` is optional::

        agent_config_from_dict({
            "backend": {"transport": "process", "command": "my-agent",
                        "args": ["--quiet"], "timeout": 60},
            "system_prompt": "Answer briefly.",
        })

    Raises:
        TypeError: ``data`` is not a mapping, a key is unknown (the valid ones
            are listed) or a value has the wrong type; the message names the
            key (``backend.timeout``, ``system_prompt``).
        ValueError: an unknown preset, an unknown transport, a value out of
            range, or a whole command line given as ``command`` (the message
            says to use ``args``).
    """
    if not isinstance(data, Mapping):
        raise TypeError(
            f"agent_config_from_dict expects a mapping, got {type(data).__name__}"
        )
    unknown = sorted(str(key) for key in data if key not in _KEYS)
    if unknown:
        raise TypeError(
            f"AgentConfig: unknown key {unknown[0]!r}; valid keys: {', '.join(_KEYS)}"
        )
    if "backend" not in data:
        raise TypeError(
            "AgentConfig.backend is missing: give a preset name or "
            '{"transport": "process", "command": ...}'
        )
    backend, default_name = _backend(data["backend"])
    name = data.get("name", default_name)
    if not isinstance(name, str):
        raise TypeError(f"AgentConfig.name must be a str, got {type(name).__name__}")

    from ..bridge import AgentConfig

    return AgentConfig(
        name=name,
        backend=backend,
        system_prompt=data.get("system_prompt"),  # type: ignore[arg-type]
    )


def _backend(
    spec: object,
) -> tuple[ProcessBackendConfig | AcpBackendConfig, str]:
    """The backend config ``spec`` describes, and a default agent name."""
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, Mapping):
        raise TypeError(
            "AgentConfig.backend must be a preset name or a mapping, got "
            f"{type(spec).__name__}"
        )
    options = dict(spec)
    name = options.pop("preset", None)
    transport = options.pop("transport", None)
    try:
        if name is not None:
            return _from_preset(name, transport, options), str(name).removeprefix(
                REGISTRY_PREFIX
            )
        return _from_transport(transport, options)
    except (TypeError, ValueError) as exc:
        # The configs say "ProcessBackendConfig.timeout must be ...": keep
        # that, and say it is the backend's.
        raise type(exc)(f"AgentConfig.backend: {exc}") from None


def _from_preset(
    name: object, transport: object, options: dict[str, object]
) -> ProcessBackendConfig | AcpBackendConfig:
    if not isinstance(name, str):
        raise TypeError(f"preset must be a str, got {type(name).__name__}")
    if transport is not None and name in PRESETS:
        if transport != PRESETS[name].transport:
            raise ValueError(
                f"preset {name!r} is a {PRESETS[name].transport} agent, not "
                f"{transport!r}; remove transport or the preset"
            )
    return preset(name, **options)


def _from_transport(
    transport: object, options: dict[str, object]
) -> tuple[ProcessBackendConfig | AcpBackendConfig, str]:
    command = options.get("command")
    default = os.path.basename(command) if isinstance(command, str) else "agent"
    if transport == "process":
        from ..backends import ProcessBackendConfig

        return ProcessBackendConfig.from_dict(options), default
    if transport == "acp":
        from ..acp import AcpBackendConfig

        return AcpBackendConfig.from_dict(options), default
    raise ValueError(
        f"transport must be 'process' or 'acp' (or give preset = NAME), got "
        f"{transport!r}"
    )
