"""The mode and config options a session is opened with (ACP session setup).

The agent's answer to ``session/new`` or ``session/load`` says which modes and
options it offers; each wanted one it offers is set, and each it does not is a
warning the user sees, never a failed run. A mode is set through the agent's
mode config option (category ``"mode"``) where it offers one: ACP prefers
config options to ``modes``, which it will drop.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

from ..rpc import methods as m

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...bridge.messages import JSONValue
    from ..rpc import Connection
    from ._config import AcpBackendConfig

__all__ = ("configure_session",)

logger = logging.getLogger(__name__)


async def configure_session(
    conn: Connection, session_id: str, config: AcpBackendConfig, opened: JSONValue
) -> JSONValue:
    """Set ``config.mode`` and ``config.config_options`` on the session just
    opened, where ``opened`` (the agent's answer) offers them.

    Returns:
        ``opened`` as it now stands: a copy with the current mode and option
        values set here (``serve --acp`` hands it to the editor).
    """
    if not isinstance(opened, dict) or not (config.mode or config.config_options):
        return opened
    opened = copy.deepcopy(opened)
    modes, mode = opened.get("modes"), config.mode
    wanted = dict(config.config_options)
    option = _mode_option(opened.get("configOptions"))
    if mode is not None and option is not None:
        wanted = {option: mode, **wanted}  # an explicit value for it wins
    elif mode is not None and await _set_mode(conn, session_id, mode, modes):
        assert isinstance(modes, dict)
        modes["currentModeId"] = mode
    if wanted:
        await _set_options(conn, session_id, wanted, opened)
    if option is not None and isinstance(modes, dict):
        # The same modes offered both ways: the copy says one current mode.
        now = _by_id(opened.get("configOptions")).get(option, {}).get("currentValue")
        if now in _mode_ids(modes):
            modes["currentModeId"] = now
    return opened


def _mode_option(offered: JSONValue) -> str | None:
    """The id of the agent's session-mode option (a select of category
    ``"mode"``), or None."""
    for option in offered if isinstance(offered, list) else []:
        if (
            isinstance(option, dict)
            and option.get("category") == "mode"
            and option.get("type") == "select"
            and isinstance(option.get("id"), str)
        ):
            return option["id"]  # type: ignore[return-value]
    return None


async def _set_options(
    conn: Connection,
    session_id: str,
    wanted: Mapping[str, str | bool],
    opened: dict[str, JSONValue],
) -> None:
    """Set the wanted config options; each one set is marked current in
    ``opened["configOptions"]``. The answer to each set is the complete set of
    options (ACP, session config options: one may depend on another, such as
    a model's effort levels), so it replaces the list the next one is looked
    up in."""
    for config_id, value in wanted.items():
        options = _by_id(opened.get("configOptions"))
        now, reply = await _set_config_option(
            conn, session_id, config_id, value, options
        )
        if now is None:
            continue
        latest = reply.get("configOptions") if isinstance(reply, dict) else None
        if isinstance(latest, list):
            opened["configOptions"] = copy.deepcopy(latest)
            options = _by_id(opened["configOptions"])
        if config_id in options:
            options[config_id]["currentValue"] = now


def _by_id(offered: JSONValue) -> dict[JSONValue, dict[str, JSONValue]]:
    """The options of a ``configOptions`` list, by id (the same objects)."""
    return {
        option.get("id"): option
        for option in (offered if isinstance(offered, list) else [])
        if isinstance(option, dict)
    }


def _mode_ids(modes: dict[str, JSONValue]) -> list[JSONValue]:
    available = modes.get("availableModes")
    if not isinstance(available, list):
        return []
    return [x.get("id") for x in available if isinstance(x, dict)]


async def _set_mode(
    conn: Connection, session_id: str, mode: str, modes: JSONValue
) -> bool:
    """Whether the session is now in ``mode``."""
    if not isinstance(modes, dict):
        logger.warning("mode %r ignored: the agent offers no session modes", mode)
        return False
    ids = _mode_ids(modes)
    if mode not in ids:
        logger.warning("mode %r ignored: the agent offers %s", mode, ids)
        return False
    if modes.get("currentModeId") != mode:
        await conn.request(
            m.SESSION_SET_MODE, {"sessionId": session_id, "modeId": mode}
        )
    return True


async def _set_config_option(
    conn: Connection,
    session_id: str,
    config_id: str,
    value: str | bool,
    options: dict[JSONValue, dict[str, JSONValue]],
) -> tuple[JSONValue, JSONValue]:
    """Set one wanted option if the agent offers it, with a value it offers:
    the value it now has (None when it was skipped) and the agent's answer
    (None when nothing was sent)."""
    option = options.get(config_id)
    kind = option.get("type") if option is not None else None
    if option is None or kind not in ("select", "boolean"):
        logger.warning(
            "config option %r ignored: the agent offers %s",
            config_id,
            sorted(str(k) for k in options),
        )
        return None, None
    if kind == "boolean":
        return await _set_boolean(conn, session_id, config_id, value, option)
    if not isinstance(value, str):
        logger.warning(
            "config option %r=%r ignored: it is a select option; give a value id",
            config_id,
            value,
        )
        return None, None
    values = _select_values(option.get("options"))
    if value not in values:
        logger.warning(
            "config option %r=%r ignored: the agent offers %s", config_id, value, values
        )
        return None, None
    if option.get("currentValue") == value:
        return value, None
    reply = await conn.request(
        m.SESSION_SET_CONFIG_OPTION,
        {"sessionId": session_id, "configId": config_id, "value": value},
    )
    return value, reply


_BOOLEAN_WORDS = {"true": True, "false": False}


async def _set_boolean(
    conn: Connection,
    session_id: str,
    config_id: str,
    value: str | bool,
    option: dict[str, JSONValue],
) -> tuple[JSONValue, JSONValue]:
    """Set a boolean option (ACP: ``type: "boolean"`` and a boolean value);
    as ``_set_config_option``."""
    wanted = value if isinstance(value, bool) else _BOOLEAN_WORDS.get(value.lower())
    if wanted is None:
        logger.warning(
            "config option %r=%r ignored: it is a boolean option; give true or false",
            config_id,
            value,
        )
        return None, None
    if option.get("currentValue") is wanted:
        return wanted, None
    reply = await conn.request(
        m.SESSION_SET_CONFIG_OPTION,
        {
            "sessionId": session_id,
            "configId": config_id,
            "type": "boolean",
            "value": wanted,
        },
    )
    return wanted, reply


def _select_values(options: JSONValue) -> list[str]:
    """The value ids of a select option, flat or grouped (ACP session config)."""
    values: list[str] = []
    for entry in options if isinstance(options, list) else []:
        if not isinstance(entry, dict):
            continue
        group = entry.get("options")
        for choice in group if isinstance(group, list) else [entry]:
            if isinstance(choice, dict) and isinstance(choice.get("value"), str):
                values.append(choice["value"])  # type: ignore[arg-type]
    return values
