"""The ACP agent role: serve an oma-bridge agent to an editor over ACP.

``serve`` runs the ``Server`` (initialize, sessions, prompts) on a connection;
each session's prompts run the target agent, or, behind ``--acp``, go to a
real ACP agent through the ``Proxy``; the ``Transcript`` records the wire."""

from ._serve import ServePermission, ServeTarget, serve, serve_streams

__all__ = ("ServePermission", "ServeTarget", "serve", "serve_streams")
