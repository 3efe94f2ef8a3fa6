"""The official ACP agent registry (github.com/agentclientprotocol/registry).

A snapshot ships as package data (``registry.json``); ``oma-bridge agents
--update`` downloads the current one into the user's cache directory, which is
read instead from then on. Entries are validated with pydantic (outside data)
when first read, and each becomes a ``registry:<id>`` preset whose command line
is built from its distribution: ``npx -y <package>``, ``uvx <package>``, or the
binary for this platform, which must be installed on PATH (nothing is
downloaded to run it). A package entry that names its ``cmd`` runs that
command from the package (``npx -y --package <package> <cmd>``, ``uvx --from
<package> <cmd>``), as FORMAT.md says.

The registry's public surface, ``oma_bridge.presets.registry``: the registry in
use (``load_registry``) and its agents as presets (``registry_presets``, also
in ``PRESETS``), ``update_registry`` (what ``--update`` does), the shipped
``protocol_matrix``, and ``REGISTRY_PREFIX``, which their preset names start
with.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from .._os.files import user_dir
from .._os.redact import redact
from ._recipe import REGISTRY_PREFIX, Preset

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = (
    "REGISTRY_PREFIX",
    "REGISTRY_URL",
    "Registry",
    "RegistryAgent",
    "cache_path",
    "load_registry",
    "protocol_matrix",
    "registry_presets",
    "update_registry",
)

REGISTRY_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"
logger = logging.getLogger(__name__)
#: Overrides the address ``--update`` downloads from (a mirror, or a test).
URL_VARIABLE = "OMA_BRIDGE_REGISTRY_URL"
_IGNORE_NEW_KEYS = {"extra": "ignore"}  # the format grows; unknown keys are skipped


@dataclass(frozen=True)
class BinaryTarget:
    """A platform's archive, the command it unpacks, and how to run it."""

    archive: str
    cmd: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    __pydantic_config__ = _IGNORE_NEW_KEYS


@dataclass(frozen=True)
class PackageDistribution:
    """An npm or PyPI package that runs the agent (``npx``, ``uvx``)."""

    package: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    #: The package's command to run, when it is not the package's default one.
    cmd: str | None = None
    __pydantic_config__ = _IGNORE_NEW_KEYS

    def argv(self, runner: str) -> tuple[str, ...]:
        """The arguments after ``npx``/``uvx`` that run this package."""
        if self.cmd is None:
            start: tuple[str, ...] = (self.package,)
        else:  # the package's other command, fetched by the package's name
            start = ("--package" if runner == "npx" else "--from", self.package)
            start += (self.cmd,)
        return ("-y", *start) if runner == "npx" else start


@dataclass(frozen=True)
class Distribution:
    """The ways an agent is distributed: a package, or binaries by platform."""

    npx: PackageDistribution | None = None
    uvx: PackageDistribution | None = None
    binary: dict[str, BinaryTarget] = field(default_factory=dict)
    __pydantic_config__ = _IGNORE_NEW_KEYS


@dataclass(frozen=True)
class RegistryAgent:
    """One agent entry (FORMAT.md of the registry)."""

    id: str
    name: str
    version: str
    description: str
    distribution: Distribution
    repository: str | None = None
    website: str | None = None
    license: str | None = None
    __pydantic_config__ = _IGNORE_NEW_KEYS

    def preset(self, platform: str) -> Preset | None:
        """How to run it over ACP here, or None when no distribution fits."""
        dist = self.distribution
        npx = dist.npx is not None
        command, package = ("npx", dist.npx) if npx else ("uvx", dist.uvx)
        if package is not None:
            args, env = (*package.argv(command), *package.args), package.env
        elif platform in dist.binary:
            target = dist.binary[platform]
            # The archive unpacks the command; installed, it is found on PATH.
            command = os.path.basename(target.cmd)
            args, env = target.args, target.env
        else:
            return None
        return Preset(
            "acp",
            command,
            args,
            f"{self.name} over ACP (registry)",
            env=env,
            docs=self.repository or self.website or "",
            version=self.version,
        )


@dataclass(frozen=True)
class Registry:
    """The registry file: its agents, and the registry's version."""

    agents: tuple[RegistryAgent, ...]
    version: str = ""
    __pydantic_config__ = _IGNORE_NEW_KEYS


def platform_key() -> str:
    """This machine as the registry names platforms (``linux-x86_64``, ...)."""
    import platform

    system = {"darwin": "darwin", "win32": "windows"}.get(sys.platform, "linux")
    machine = platform.machine().lower()
    arch = "aarch64" if machine in ("arm64", "aarch64") else "x86_64"
    return f"{system}-{arch}"


def cache_path() -> Path:
    """Where ``--update`` keeps the downloaded registry (XDG cache directory)."""
    return user_dir("XDG_CACHE_HOME", ".cache") / "registry.json"


def parse_registry(data: object, source: str) -> Registry:
    """``data`` (decoded JSON) as a Registry.

    Raises:
        ValueError: it is not a registry; names ``source`` and the key path.
    """
    from pydantic import TypeAdapter, ValidationError

    from ._errors import describe

    try:
        return TypeAdapter(Registry).validate_python(data)
    except ValidationError as exc:
        raise ValueError(describe(exc, source)) from None


def load_registry() -> tuple[Registry, str]:
    """The downloaded registry if there is a readable one, else the snapshot;
    with where it came from. A broken download is skipped with a WARNING that
    names it (``--update`` again replaces it)."""
    from .._os.files import loads_json, read_capped

    cached = cache_path()
    try:
        data = loads_json(read_capped(str(cached)))
        return parse_registry(data, str(cached)), str(cached)
    except FileNotFoundError:
        pass  # none downloaded: the snapshot serves
    except (OSError, ValueError) as exc:
        logger.warning("%s: %s; using the snapshot oma-bridge ships", cached, exc)
    from importlib.resources import files

    snapshot = files(__package__).joinpath("registry.json")
    return parse_registry(loads_json(snapshot.read_bytes()), "registry.json"), (
        "the snapshot shipped with oma-bridge"
    )


@cache
def registry_presets() -> Mapping[str, Preset]:
    """Every registry agent that can run here, as ``registry:<id>`` presets."""
    registry, _ = load_registry()
    here = platform_key()
    found = {}
    for agent in registry.agents:
        known = agent.preset(here)
        if known is not None:
            found[REGISTRY_PREFIX + agent.id] = known
    return found


@cache
def protocol_matrix() -> Mapping[str, Mapping[str, Any]]:
    """What the registry's daily protocol matrix found, by agent id.

    Each entry has the matrix's ``date``, the ``version`` it probed, and the
    status of ``initialize`` and ``session/new`` (``"success"``,
    ``"auth_required"``, ``"error"``, ...) and the ``auth_methods`` offered.
    Shipped data (``protocol_matrix.json``): a downloaded registry does not
    change it, so compare ``version`` before trusting it for another version.
    """
    import json
    from importlib.resources import files

    data = json.loads(files(__package__).joinpath("protocol_matrix.json").read_bytes())
    return {
        agent_id: {"date": data["date"], **facts}
        for agent_id, facts in data["agents"].items()
    }


def _download(url: str, timeout: float, until: float, limit: int) -> bytes:
    """The body at ``url``, read a piece at a time until ``until`` (a
    ``time.monotonic()`` instant), and at most one byte past ``limit`` (which
    tells a body too large)."""
    import time
    import urllib.request

    chunks: list[bytes] = []
    size = 0
    with urllib.request.urlopen(url, timeout=timeout) as response:
        while size <= limit:
            if time.monotonic() > until:
                raise TimeoutError("no whole answer before the download's deadline")
            chunk = response.read1(min(65536, limit + 1 - size))  # what has come
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def update_registry(
    url: str | None = None, *, timeout: float = 15.0, deadline: float = 60.0
) -> Path:
    """Download the registry into ``cache_path()``; return that path.

    Args:
        url: Where from (default: ``$OMA_BRIDGE_REGISTRY_URL``, else the official
            address).
        timeout: Seconds each step of the download (connect, a read) may take.
        deadline: Seconds the whole download may take: a server that answers
            a few bytes at a time is given up on then.

    Raises:
        ConnectionError: the registry could not be reached (no network, or it
            answered with an error); the message says so.
        ValueError: what came back is not a registry.
    """
    import http.client
    import time

    from .._os.files import MAX_FILE_BYTES, loads_json

    url = url or os.environ.get(URL_VARIABLE) or REGISTRY_URL
    shown = redact(url)  # a URL may carry credentials or a token
    try:
        body = _download(url, timeout, time.monotonic() + deadline, MAX_FILE_BYTES)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError too
        reason = redact(str(getattr(exc, "reason", exc)))
        raise ConnectionError(
            f"could not download the ACP registry from {shown} ({reason}); updating "
            "needs a network connection. The registry in use is unchanged."
        ) from None
    if len(body) > MAX_FILE_BYTES:
        raise ValueError(
            f"{shown}: larger than {MAX_FILE_BYTES} bytes; registry unchanged"
        )
    try:
        data: Any = loads_json(body)
    except ValueError as exc:
        raise ValueError(f"{shown}: {redact(str(exc))}; registry unchanged") from None
    parse_registry(data, url)
    target = cache_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(body)
    os.replace(partial, target)  # never a half-written registry
    registry_presets.cache_clear()
    return target
