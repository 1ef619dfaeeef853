"""The local S3 endpoint: moto's S3 emulation served by waitress, a production WSGI server.

moto's own ``moto.server`` runs on werkzeug's development server, whose handling of
``Expect: 100-continue`` makes the AWS SDK v2 (inside hadoop-aws) fail some uploads with
"Status Code: 100"; waitress speaks HTTP/1.1 properly.  Usage:
``python -m workbench.s3server --port 9000`` (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import os
import re
import threading


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--ignore-conditional-writes", action="store_true",
                        help="drop If-None-Match and If-Match from every request, as a store that does not "
                             "honour them would (for the lease's probe test)")
    parser.add_argument("--hold-first-put", metavar="REGEX",
                        help="hold the first PUT of each key whose path matches REGEX until a POST to "
                             "/_faults/release (at most 60 s); GET /_faults/held lists the held paths")
    parser.add_argument("--lose-first-answer", metavar="REGEX",
                        help="store the first PUT of each key whose path matches REGEX, then answer it "
                             "with a 500 instead of the store's answer, as a lost response")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from waitress import serve

    app = DomainDispatcherApplication(create_backend_app)
    if args.ignore_conditional_writes:
        app = _without_conditions(app)
    if args.hold_first_put or args.lose_first_answer:
        app = _Faults(app, args.hold_first_put, args.lose_first_answer)
    serve(app, host=args.host, port=args.port, threads=args.threads, ident="recon-s3",
          max_request_body_size=8 * 1024**3, channel_timeout=300, connection_limit=512)


def _without_conditions(app):
    """``app`` as a store that ignores conditional writes sees requests: without their conditions."""
    def serve_unconditionally(environ, start_response):
        for header in ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH"):
            environ.pop(header, None)
        return app(environ, start_response)
    return serve_unconditionally


class _Faults:
    """``app`` with the faults of two drivers racing for one object, for the commit-fencing tests:
    a PUT held until the test lets it go (another driver's write lands meanwhile), and a PUT stored
    whose answer is lost (the client retries what is already there)."""

    def __init__(self, app, hold: str | None, lose: str | None):
        self.app, self.hold, self.lose = app, hold and re.compile(hold), lose and re.compile(lose)
        self.held: list[str] = []
        self.seen: set[tuple[str, str]] = set()
        self.released = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD")
        if path == "/_faults/held":
            start_response("200 OK", [("Content-Type", "text/plain")])
            with self.lock:
                return ["\n".join(self.held).encode()]
        if path == "/_faults/release":
            self.released.set()
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"released"]
        if method == "PUT" and self._first("hold", self.hold, path):
            with self.lock:
                self.held.append(path)
            self.released.wait(60)
        if method == "PUT" and self._first("lose", self.lose, path):
            answer = self.app(environ, lambda status, headers, exc_info=None: (lambda data: None))
            for _ in answer:  # stored; its answer goes nowhere
                pass
            getattr(answer, "close", lambda: None)()
            start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
            return [b"<Error><Code>InternalError</Code><Message>the answer was lost</Message></Error>"]
        return self.app(environ, start_response)

    def _first(self, fault: str, pattern, path: str) -> bool:
        """Whether this is the first PUT of ``path`` that ``fault``'s ``pattern`` matches."""
        if not pattern or not pattern.search(path):
            return False
        with self.lock:
            first = (fault, path) not in self.seen
            self.seen.add((fault, path))
        return first


if __name__ == "__main__":
    main()
