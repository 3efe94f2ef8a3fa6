"""Known agents (built-in presets and the ACP registry) and named agents from
config files; above both transports.

Two public submodules hold the rest: ``config`` (named agents from
``oma-bridge.toml``: ``lookup``, ``configured_agents``, ``schema``) and
``registry`` (the official ACP registry: ``update_registry``,
``protocol_matrix``, ``REGISTRY_PREFIX``). The recipe (``_recipe``) sits below
the registry, and the name mapping (``_presets``) above it.
"""

from ._dicts import agent_config_from_dict
from ._presets import PRESETS, preset
from ._recipe import Preset

__all__ = ("PRESETS", "Preset", "agent_config_from_dict", "preset")
