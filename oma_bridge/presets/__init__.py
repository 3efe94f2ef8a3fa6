"""Known agents (built-in presets and the ACP registry) and named agents from
config files; above both transports."""

from ._dicts import agent_config_from_dict
from ._presets import PRESETS, preset
from ._recipe import Preset

__all__ = ("PRESETS", "Preset", "agent_config_from_dict", "preset")
