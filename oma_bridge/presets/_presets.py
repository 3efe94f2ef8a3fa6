"""Known agents by name: ``PRESETS``, and ``preset(NAME, **options)``.

The built-in presets are data (``presets.toml`` beside this module); the agents
of the official ACP registry are presets too, named ``registry:<id>``, and the
registry is read only when such a name, or the whole list, is asked for. A
preset is a recipe, not a promise that the agent is installed: the command is
looked up on PATH when the first run starts, and a missing one is a
``BackendStartError`` that names the PATH searched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from ._recipe import REGISTRY_PREFIX, Preset

if TYPE_CHECKING:
    from ..acp import AcpBackendConfig
    from ..backends import ProcessBackendConfig

__all__ = ("PRESETS", "closest", "preset", "unknown")


def _builtin() -> dict[str, Preset]:
    """The presets shipped in ``presets.toml`` (trusted data: no validation
    library on this path; a test validates the file with pydantic)."""
    from importlib.resources import files

    from .._os.files import loads_toml

    data = files(__package__).joinpath("presets.toml").read_bytes()
    return {name: Preset(**table) for name, table in loads_toml(data).items()}


class _Presets(Mapping[str, Preset]):
    """The built-in presets, then the registry agents; each part read on first
    use, the registry only when a ``registry:`` name or the whole list is asked."""

    def __init__(self) -> None:
        self._builtin: dict[str, Preset] | None = None

    def builtin(self) -> dict[str, Preset]:
        if self._builtin is None:
            self._builtin = _builtin()
        return self._builtin

    def _registry(self) -> Mapping[str, Preset]:
        from .registry import registry_presets

        return registry_presets()

    def __getitem__(self, name: str) -> Preset:
        if name.startswith(REGISTRY_PREFIX):
            return self._registry()[name]
        return self.builtin()[name]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        yield from self.builtin()
        yield from self._registry()

    def __len__(self) -> int:
        return len(self.builtin()) + len(self._registry())


PRESETS: Mapping[str, Preset] = _Presets()


def unknown(name: str, known: list[str]) -> ValueError:
    """The error for a name that is not a known agent: one line naming the
    closest few of ``known`` (configured, built-in, registry), not all of them
    (`oma-bridge agents` lists them)."""
    names = list(dict.fromkeys(known))
    close = closest(name, names)
    hint = f"; did you mean {_either(close)}?" if close else ""
    return ValueError(
        f"unknown agent {name!r}{hint} (`oma-bridge agents` lists all {len(names)})"
    )


def closest(name: str, known: list[str], most: int = 3) -> list[str]:
    """The names of ``known`` closest to ``name`` (difflib's ratio, at least
    0.6), best first; a ``registry:ID`` is also compared by its ID alone, so
    ``codex`` finds ``registry:codex-acp`` as well as ``codex-acp``."""
    from difflib import SequenceMatcher

    wanted = name.lower().removeprefix(REGISTRY_PREFIX)
    registry = name.startswith(REGISTRY_PREFIX)
    scored = []
    for index, candidate in enumerate(known):
        short = candidate.lower().removeprefix(REGISTRY_PREFIX)
        ratio = SequenceMatcher(None, wanted, short).ratio()
        # Of two equally close, the one of the kind asked for (registry or not).
        ratio += 0.01 * (registry == candidate.startswith(REGISTRY_PREFIX))
        if ratio >= 0.6:
            scored.append((-ratio, index, candidate))
    return [candidate for _, _, candidate in sorted(scored)[:most]]


def _either(names: list[str]) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(name) for name in names]
    return " or ".join(
        [", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted
    )


def preset(name: str, **options: object) -> ProcessBackendConfig | AcpBackendConfig:
    """The backend config of a known agent, with ``options`` set on it.

    Args:
        name: A key of ``PRESETS`` (a built-in name, or ``registry:<id>``).
        **options: Further fields of the config (``cwd``, ``env``, ``timeout``,
            ``permission``, ...); ``env`` is merged over the preset's own.

    Raises:
        ValueError: ``name`` is not a known agent (the message lists them).
        TypeError: an option is not a field of the config, or has the wrong type.
    """
    try:
        known = PRESETS[name]
    except KeyError:
        raise unknown(name, list(PRESETS)) from None
    return known.backend_config(**options)
