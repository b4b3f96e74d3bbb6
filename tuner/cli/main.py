"""Entry point: `fusion-tuner SUBCOMMAND ...`; errors become one clear message and an exit code from
help.EXIT_CODES (2: bad input or environment, 4: internal error)."""

from __future__ import annotations

import errno
import importlib
import os
import sys

from tuner.cli import help as H

_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}

# subcommand -> module in tuner.cli (each has main(argv) -> int)
SUBCOMMANDS = {
    "check": "check",
    "compile": "compile",
    "run": "run",
    "info": "info",
    "plan": "plan",
    "tune-model": "tune_model",
    "db": "db",
    "compare": "compare",
}


def _usage() -> str:
    lines = [f"usage: {H.PROG} COMMAND [options]", "", H.DESCRIPTION, "", "commands:"]
    lines += [f"  {name:<11} {H.COMMANDS[name]}" for name in SUBCOMMANDS if _available(name)]
    lines += ["", f"`{H.PROG} COMMAND --help` for a command's options; `{H.PROG} --version`.", "", "exit codes:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in H.EXIT_CODES.items()]
    return "\n".join(lines)


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"tuner.cli.{SUBCOMMANDS[name]}") is not None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from tuner import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS or not _available(name):
        print(f"{H.PROG}: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    debug = "--debug" in rest
    verbose = debug or any(a in ("-v", "--verbose") for a in rest)
    if verbose:  # everything live, C++ warnings included
        return _run(name, rest, debug)
    from tuner.core.native_log import native_stderr_to_file

    with native_stderr_to_file() as log:
        code = _run(name, rest, debug)
        if code == 4:  # an internal error: what TVM said may explain it
            log["keep"] = True
            print(f"  native log (TVM, ONNX Runtime): {log['path']}", file=sys.stderr)
    return code


def _run(name: str, rest: list[str], debug: bool) -> int:
    """The subcommand, its errors said in one line each (exit codes: 2 bad input, 4 internal error)."""
    from tuner.core.errors import TunerError

    try:
        module = importlib.import_module(f"tuner.cli.{SUBCOMMANDS[name]}")
        return int(module.main(rest) or 0)
    except TunerError as err:
        if debug:
            raise
        print(f"{H.PROG} {name}: error: {err.message}", file=sys.stderr)
        if err.hint:
            print(f"  hint: {err.hint}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{H.PROG} {name}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        if debug or err.errno not in _ENVIRONMENT_ERRNOS:
            return _internal(name, err, debug)
        # the machine, not us: a full disk, a read-only or forbidden folder
        where = f" {err.filename}" if err.filename else ""
        print(f"{H.PROG} {name}: error: cannot write{where}: {err.strerror}", file=sys.stderr)
        print("  hint: free space, or choose a writable location", file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not bad input: still one line unless --debug
        return _internal(name, err, debug)


def _internal(name: str, err: Exception, debug: bool) -> int:
    """A bug, not bad input: one line and exit code 4, or the traceback with --debug."""
    if debug:
        raise err
    last = str(err).strip().splitlines()[-1] if str(err).strip() else ""
    print(
        f"{H.PROG} {name}: internal error: {type(err).__name__}: {last}\n"
        f"  hint: rerun with --debug for the traceback and report it",
        file=sys.stderr,
    )
    return 4


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
