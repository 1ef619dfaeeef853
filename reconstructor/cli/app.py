"""``reconstructor``: the command line (also ``python -m reconstructor``).

Exit codes: 0 done; 2 bad usage or config (nothing started); 3 integrity violation; 130 and 143
stopped by SIGINT (Ctrl-C) and SIGTERM; 1 any other failure.  Every failure or stop ends with one
line on stderr saying what is wrong or where the run stopped.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from reconstructor import settings
from reconstructor.cli import commands
from reconstructor.cli.parser import build_parser
from reconstructor.errors import EXIT_OK, StoppedBySignal
from reconstructor.failures import explain

log = logging.getLogger("reconstructor")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _dispatch(args)
    except StoppedBySignal as stopped:  # run and replay: a signal stops the query, one line says where
        print(f"reconstructor: {stopped}", file=sys.stderr, flush=True)
        if stopped.abandoned:
            # The engine's threads that ran the abandoned batch would hold the exit until they end
            # (seconds, or past the grace a scheduler allows); the checkpoint makes waiting needless.
            sys.stdout.flush()
            os._exit(stopped.exit_code)
        return stopped.exit_code
    except KeyboardInterrupt:  # Ctrl-C where no handler of a run took it
        interrupted = StoppedBySignal(signal.SIGINT, "interrupted before it finished")
        print(f"reconstructor: {interrupted}", file=sys.stderr, flush=True)
        return interrupted.exit_code
    except BrokenPipeError:  # the reader went away (`... | head`): nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every failure ends as one line
        failure = explain(exc, _config_or_none(args))
        if getattr(args, "verbose", False) and (failure is not exc or exc.__cause__ is not None):
            traceback.print_exception(exc)
        print(f"reconstructor: {failure}", file=sys.stderr)
        return failure.exit_code


def _dispatch(args) -> int:
    handlers = {
        "run": commands.run,
        "replay": commands.replay,
        "compact": commands.compact,
        "state": commands.state,
        "verify": commands.verify,
        "asof": commands.asof,
        "check": commands.check,
        "config": commands.config_show,
        "jars": commands.jars,
    }
    return handlers[args.command](args) or EXIT_OK


def _config_or_none(args) -> settings.Settings | None:
    """The settings a failure's line may name; none when they are what failed to load."""
    try:
        return settings.from_args(args)
    except Exception:  # noqa: BLE001 - the settings that failed to load name nothing for the line
        return None



__all__ = ["build_parser", "main"]
