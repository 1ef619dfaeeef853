"""The local S3 endpoint: moto's S3 emulation served by waitress, a production WSGI server.

moto's own ``moto.server`` runs on werkzeug's development server, whose handling of
``Expect: 100-continue`` makes the AWS SDK v2 (inside hadoop-aws) fail some uploads with
"Status Code: 100"; waitress speaks HTTP/1.1 properly.  Usage:
``python -m workbench.s3server --port 9000`` (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import os


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--ignore-conditional-writes", action="store_true",
                        help="drop If-None-Match and If-Match from every request, as a store that does not "
                             "honour them would (for the lease's probe test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from waitress import serve

    app = DomainDispatcherApplication(create_backend_app)
    if args.ignore_conditional_writes:
        app = _without_conditions(app)
    serve(app, host=args.host, port=args.port, threads=args.threads, ident="recon-s3",
          max_request_body_size=8 * 1024**3, channel_timeout=300, connection_limit=512)


def _without_conditions(app):
    """``app`` as a store that ignores conditional writes sees requests: without their conditions."""
    def serve_unconditionally(environ, start_response):
        for header in ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH"):
            environ.pop(header, None)
        return app(environ, start_response)
    return serve_unconditionally


if __name__ == "__main__":
    main()
