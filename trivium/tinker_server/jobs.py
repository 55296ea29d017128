"""The futures the SDK polls: work queued in arrival order and run by one worker thread.

Every training and sampling request is submitted here and answered at once with a request
id; the SDK then asks ``retrieve_future`` for the result. One thread runs the work in the
order it arrived, which is the order the SDK sends a training client's requests in (it
waits for each request's turn), and keeps the models off the HTTP threads. A result is a
``Result`` (the response body and its media type); an error the user can fix
(``UserError``) fails the future with category "user", any other with category "server".
Finished results are kept for the last ``KEEP_RESULTS`` requests, so a retried poll finds them.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from trivium.errors import UserError

logger = logging.getLogger(__name__)
KEEP_RESULTS = 4096


@dataclass(frozen=True)
class Result:
    body: bytes | dict
    media_type: str = "application/json"


class JobFailed(Exception):
    def __init__(self, message: str, category: str):
        super().__init__(message)
        self.category = category


class JobQueue:
    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._futures: OrderedDict[str, Future] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self._run, name="tinker-server-worker", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], Result]) -> str:
        request_id = f"req-{next(self._ids)}"
        future: Future = Future()
        with self._lock:
            self._futures[request_id] = future
            while len(self._futures) > KEEP_RESULTS:
                self._futures.popitem(last=False)
        self._queue.put((future, work))
        return request_id

    def future(self, request_id: str) -> Future | None:
        with self._lock:
            return self._futures.get(request_id)

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            future, work = item
            try:
                future.set_result(work())
            except UserError as error:
                future.set_exception(JobFailed(str(error), "user"))
            except Exception as error:  # reported to the client, logged here
                logger.exception("a queued request failed")
                future.set_exception(JobFailed(f"{type(error).__name__}: {error}", "server"))
