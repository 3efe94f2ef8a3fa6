"""The operating-system floor: processes, descriptors, terminals and files,
shared by every transport.

Private to oma-bridge and shared by design: the backends, the ACP roles, batch
jobs, presets and the CLI import its modules directly (``from .._os.child import
Child``).
Each module holds one concern:

- ``child``: spawn a child in its own process group, and the one stop (close
  stdin, SIGTERM, a grace, SIGKILL, reap) for one child or many;
- ``supervisor``: the keeper, a ``/bin/sh`` started at the first spawn that
  SIGKILLs every child's group still running when we die (even by SIGKILL);
- ``command``: a child's command line and environment, resolved before a spawn;
- ``exit``: how a child ended, in words (exit statuses, the output tail);
- ``reactor``: the one reactor (descriptors and callbacks, waited on blocking
  or async) and the one non-blocking pipe reader;
- ``fdstream``: anyio byte streams over raw non-blocking descriptors;
- ``redact``: secrets out of every text a human may see;
- ``finite``: NaN and infinities out of the JSON we write (frames, stdout lines);
- ``checks``: the field checks of backend configs;
- ``files``: where our files live, and the one capped, strict reader of the
  JSON and TOML files we are handed (config, task, state and registry files);
- ``screen``: a terminal's output as plain text (the PTY backend's runs, and a
  login screen an ACP agent draws on its protocol stream).

The package itself imports nothing: a blocking run loads no event loop, and a
plain run no stream it does not use.
"""
