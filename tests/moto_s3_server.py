"""moto's S3 server with the atomicity real S3 gives conditional writes.

moto 5.2's ``PUT`` with ``If-None-Match: *`` checks whether the key exists and then
stores the object, without a lock, while its server handles requests on threads: two
writers racing for one key can both be told they created it (the object-store stress
test caught two commits of one version this way). S3 itself makes the create atomic.
This runs moto's own application (as ``moto_server`` does) with every request that
changes objects serialised, so the server behaves as S3 does for the race under test;
reads stay concurrent.

Run as ``python -m tests.moto_s3_server PORT``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

_MUTATING = frozenset({"PUT", "POST", "DELETE"})


def serialised_writes(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] not in _MUTATING:
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))  # the whole response, inside the lock

    return wrapped


def main(port: int) -> None:
    run_simple("127.0.0.1", port, serialised_writes(DomainDispatcherApplication(create_backend_app)),
               threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(int(sys.argv[1]))
