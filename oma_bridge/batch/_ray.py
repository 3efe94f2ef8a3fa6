"""The Ray executor of ``run_batch``: each attempt is a Ray task on some worker.

The task builds the agent on the worker and runs it there without an event
loop (``Agent.run_sync``: for a process backend, ``ProcessBackend.run_blocking``),
so the agent's processes live and die on that machine. Only plain values travel
back (an ``Outcome``): exceptions with keyword-only constructors do not survive
pickling. Retries, timeouts, cancellation and the output file stay on the
driver. Ray is imported only here, and only when this executor is chosen.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import TYPE_CHECKING

import anyio

from ..bridge import Agent, AgentConfig, OmaBridgeError
from ._policy import Outcome

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable

    from ..bridge.messages import LLMMessage
    from ._items import BatchItem

INSTALL_HINT = (
    "the Ray executor needs Ray, which is not installed: "
    "pip install 'oma-bridge[ray]' (or pip install ray)"
)
_POLL_MAX = 0.1


def run_on_worker(config: AgentConfig, input: str | list[LLMMessage]) -> Outcome:
    """The Ray task: one attempt, from start to reaped processes, on the worker.

    ``ray.cancel`` interrupts it with KeyboardInterrupt, on which the process
    backend kills and reaps the agent's whole process group before it ends.
    """
    try:
        return Outcome.of(Agent(config).run_sync(input))
    except OmaBridgeError as exc:  # refused at the boundary: nothing was spawned
        return Outcome.failed(exc)


def executor(
    address: str | None,
) -> tuple[
    Callable[[BatchItem, AgentConfig | Agent], Awaitable[Outcome]],
    Callable[[], AsyncGenerator[None]],
]:
    """The attempt function and the Ray session around the batch.

    Raises:
        ImportError: Ray is not installed (the message says what to install).
    """
    if importlib.util.find_spec("ray") is None:
        raise ImportError(INSTALL_HINT)
    remote: list[object] = []

    async def session() -> AsyncGenerator[None]:
        import ray

        started = False
        if not ray.is_initialized():
            # Connects to RAY_ADDRESS or ``address``, else starts a local
            # instance; blocking for seconds, so off the event loop thread.
            await anyio.to_thread.run_sync(
                functools.partial(
                    ray.init,
                    address=address,
                    include_dashboard=False,
                    log_to_driver=False,
                )
            )
            started = True
        # Ray's own retries stay off: the driver decides what is worth retrying.
        remote.append(ray.remote(max_retries=0)(run_on_worker))
        try:
            yield
        finally:
            if started:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(ray.shutdown)

    async def attempt(item: BatchItem, config: AgentConfig | Agent) -> Outcome:
        import ray

        # run_batch forces fresh_process for Ray: a worker never holds an Agent.
        assert not isinstance(config, Agent)
        ref = remote[0].remote(config, item.input)  # type: ignore[attr-defined]
        delay = 0.002
        try:
            # Poll rather than block a thread in ray.get: a cancelled wait then
            # leaves nothing behind on the driver.
            while not ray.wait([ref], timeout=0)[0]:
                await anyio.sleep(delay)
                delay = min(delay * 2, _POLL_MAX)
        except BaseException:
            ray.cancel(ref)  # KeyboardInterrupt in the task: the tree is killed
            raise
        try:
            outcome: Outcome = ray.get(ref)
        except ray.exceptions.RayError as exc:
            # The worker died or the task could not run: like an agent crash,
            # worth a retry.
            return Outcome.lost("RAY_TASK_FAILED", str(exc))
        return outcome

    return attempt, session
