"""Spans for runs, tasks and agent calls, through OpenTelemetry when installed.

``tracer=None`` uses OpenTelemetry's global tracer if the ``otel`` extra is
installed (a no-op until the application configures an SDK, as for any
instrumented library); without the extra nothing is imported and spans cost
nothing. A ``tracer`` given explicitly (an ``opentelemetry.trace.Tracer``) is
used as is.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..bridge import TokenUsage

#: Attribute values OpenTelemetry accepts that we use.
Attr = str | int | float | bool


@final
class Span:
    """One span being recorded, or a stand-in that records nothing."""

    __slots__ = ("_span",)

    def __init__(self, span: object | None) -> None:
        self._span = span

    def set(self, **attributes: Attr | None) -> None:
        """Set ``oma.<name>`` attributes; None values are left out."""
        if self._span is None:
            return
        for name, value in attributes.items():
            if value is not None:
                self._span.set_attribute(f"oma.{name}", value)  # type: ignore[attr-defined]

    def usage(self, usage: TokenUsage) -> None:
        self.set(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=usage.cost,
        )

    def status(self, ok: bool, description: str | None = None) -> None:
        """The span's status: OK, or ERROR with a (redacted, short) description."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        code = StatusCode.OK if ok else StatusCode.ERROR
        self._span.set_status(Status(code, None if ok else description))  # type: ignore[attr-defined]


_NO_SPAN = Span(None)


@final
class Tracing:
    """Opens spans on ``tracer``, or on the global tracer when OpenTelemetry is
    installed, or not at all."""

    def __init__(self, tracer: object | None) -> None:
        self._tracer = tracer
        self._looked = tracer is not None

    def _get(self) -> object | None:
        if not self._looked:
            self._looked = True
            if importlib.util.find_spec("opentelemetry") is not None:
                from opentelemetry import trace

                self._tracer = trace.get_tracer("oma_bridge")
        return self._tracer

    @contextmanager
    def span(self, name: str, **attributes: Attr | None) -> Iterator[Span]:
        """A span named ``name``, current for what runs inside the block.

        Exceptions are not recorded on the span (cancellation is how a budget
        stops work, not an error of the span): callers set the status.
        """
        tracer = self._get()
        if tracer is None:
            yield _NO_SPAN
            return
        with tracer.start_as_current_span(  # type: ignore[attr-defined]
            name, record_exception=False, set_status_on_exception=False
        ) as raw:
            span = Span(raw)
            span.set(**attributes)
            yield span
