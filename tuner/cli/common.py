"""Arguments shared by several subcommands, and output helpers."""

from __future__ import annotations

import argparse
import json
import sys

from tuner.cli import help as H


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, unless the help already says it or there is none to say."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text or action.default in (None, False, argparse.SUPPRESS) or not text:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse with short errors: the one wrong option, the option it most looks like, and where help is (not
    the whole usage block)."""

    def error(self, message):
        import difflib

        words = message.split(": ", 1)[1].split() if message.startswith("unrecognized arguments") else []
        unknown = [w for w in words if w.startswith("-")]
        known = [s for a in self._actions for s in a.option_strings]
        if unknown:
            close = difflib.get_close_matches(unknown[0].split("=")[0], known, n=1, cutoff=0.6)
            message = f"unknown option {unknown[0]}" + (f"; did you mean {close[0]}?" if close else "")
        elif words:
            message = f"unexpected argument {words[0]!r}"
        sys.stderr.write(f"{self.prog}: error: {message}\n  hint: {self.prog} --help lists every option\n")
        sys.exit(2)


def parser(command: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of one subcommand: `fusion-tuner COMMAND`, its description from help.COMMANDS, defaults shown."""
    return Parser(prog=f"{H.PROG} {command}", description=H.COMMANDS[command], formatter_class=HelpFormatter, **kwargs)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:DIMS", help=H.INPUT_SHAPE)
    p.add_argument("--const", action="append", default=[], metavar="NAME=VALUE", help=H.CONST)


def add_tune_shape_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tune-shape", action="append", default=[], metavar="NAME:DIMS", help=H.TUNE_SHAPE)


def parse_tune_shapes(args) -> list[dict] | None:
    from tuner.cli.shapes import parse_input_shapes

    return [parse_input_shapes([v], flag="--tune-shape") for v in args.tune_shape] or None


def add_target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="auto", help=H.TARGET)


def add_dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", metavar="{float32,float16}", help=H.DTYPE)


def add_fusion_arg(p: argparse.ArgumentParser, default: str = "tvm") -> None:
    from tuner.fusion import known_strategies

    p.add_argument("--fusion", default=default, help=H.FUSION.format(known=", ".join(known_strategies())))


def add_layout_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layout", default="auto", choices=["auto", "nchw", "nhwc", "nchwc"], help=H.LAYOUT)


def add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=H.JSON)
    add_verbosity_flags(p)
    p.add_argument("--debug", action="store_true", help=H.DEBUG)


def add_verbosity_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help=H.VERBOSE)
    group.add_argument("-q", "--quiet", action="store_true", help=H.QUIET)


_quiet = False  # -q of the command being run: every console() prints nothing (errors go to err_console)


def parse(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse one subcommand's arguments and apply its -q/-v to the consoles and TVM's loggers."""
    global _quiet
    args = p.parse_args(argv)
    _quiet = bool(getattr(args, "quiet", False))
    if not getattr(args, "verbose", False):
        import logging
        import warnings

        for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
            logging.getLogger(name).setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", module="tvm")
    return args


def parse_model_args(args):
    from tuner.cli.shapes import parse_consts, parse_input_shapes

    return parse_input_shapes(args.input_shape), parse_consts(args.const)


def print_json(doc) -> None:
    json.dump(doc, sys.stdout, indent=2, default=_json_default)
    sys.stdout.write("\n")


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def console():
    import sys

    from rich.console import Console

    # Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
    width = None if sys.stdout.isatty() else 200
    return Console(highlight=False, soft_wrap=True, width=width, quiet=_quiet)


def err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)
