"""VACUUM's work on a thread: a Spark job (listing, deleting) runs while the driver does other work."""

from __future__ import annotations

import threading
from typing import Any


class Background:
    """Run a function on a thread (a Spark job, while the driver does other work) and join it."""

    def __init__(self, fn, *args: Any) -> None:
        self._result: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn, *args), name="vacuum-spark-job", daemon=True)
        self._thread.start()

    def _run(self, fn, *args: Any) -> None:
        try:
            self._result["value"] = fn(*args)
        except BaseException as exc:  # re-raised on the joining thread
            self._result["error"] = exc

    def running_after(self, seconds: float) -> bool:
        """Wait up to ``seconds``; whether it is still running."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def join(self) -> Any:
        """Wait for the function; its result, or what it raised."""
        self._thread.join()
        if "error" in self._result:
            raise self._result["error"]
        return self._result["value"]
