"""The process backend: any command-line program as a text-only agent, fresh per run.

The rooms, in the order a run passes them:

- ``_config``: ``ProcessBackendConfig``, what the user describes; it creates
- ``_backend``: ``ProcessBackend``, which works out each run's environment and
  executable (``Launch``) and hands them to a driver;
- ``_core``: ``RunCore``, one run's state without I/O (bytes in, events and the
  result out, the deadline, the output cap, how it ended);
- ``_io``: ``Plan`` (the spawn) and ``RunIO`` (the child's pipes on a reactor,
  moved into the core), and ``advance``, the one place that says what each
  step of a run does;
- ``_drivers``: the async stream and the blocking run, which only wait;
- ``_pool``: ``RunPool``, many runs in one thread for batch jobs.
"""

from ._backend import ProcessBackend
from ._config import OUTPUT_FORMATS, InputMode, OutputFormat, ProcessBackendConfig
from ._core import RunCore, Step

__all__ = (
    "OUTPUT_FORMATS",
    "InputMode",
    "OutputFormat",
    "ProcessBackend",
    "ProcessBackendConfig",
    "RunCore",
    "Step",
)
