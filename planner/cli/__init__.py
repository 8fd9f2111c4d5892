"""megaplan's command line: parse, call the library, render (docs/architecture.md: the CLI is thin)."""

from __future__ import annotations

import inspect
import sys
from contextlib import contextmanager

import click

from planner import __version__
from planner.cli.given_once import GivenOnce, OnceCommand
from planner.errors import PlannerError

BAD_INPUT = 2
COMMAND_MODULES = ("catalog", "plans", "runs")  # planner.cli modules whose commands register on `cli`
MODULE_OF = {  # where each command lives, so running one imports only its module (any other: all of them)
    **dict.fromkeys(("presets", "validate", "calibrate"), "catalog"),
    **dict.fromkeys(("explain", "export", "compare"), "plans"),
    **dict.fromkeys(("search", "sweep"), "runs"),
}


class _Commands(dict):
    """The commands of ``cli``, their modules imported on first use: ``megaplan --version`` needs none
    of them (nor numpy, pydantic or rich), and ``megaplan search`` only its own."""

    loaded = False

    def _load(self, key: str | None = None) -> None:
        import importlib

        if key in MODULE_OF and not dict.__contains__(self, key):
            with _imports_without_gc():
                importlib.import_module(f"planner.cli.{MODULE_OF[key]}")
            examples_last(cli, dict.get(self, key))
        if not self.loaded and not dict.__contains__(self, key):
            self.loaded = True
            with _imports_without_gc():
                for name in COMMAND_MODULES:
                    importlib.import_module(f"planner.cli.{name}")
            examples_last(cli)

    def __missing__(self, key):
        self._load(key)
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        raise KeyError(key)

    def get(self, key, default=None):
        self._load(key)
        return dict.get(self, key, default)

    def __contains__(self, key) -> bool:
        self._load(key)
        return dict.__contains__(self, key)

    def __iter__(self):
        self._load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load()
        return dict.__len__(self)

    def keys(self):
        self._load()
        return dict.keys(self)

    def values(self):
        self._load()
        return dict.values(self)

    def items(self):
        self._load()
        return dict.items(self)


@contextmanager
def _imports_without_gc():
    """A command's modules (numpy, pydantic and the planner: some 200,000 objects that live as long as the
    process) import with the cyclic garbage collector paused, and are then frozen out of its generations
    (``gc.freeze``), so neither the imports nor the command's own collections traverse them again. Without
    it the collector took 88 M of the 1,935 M instructions of `megaplan search --model gpt3-175b --gpus 1024
    --json` (callgrind); peak RSS the same (70.2 MiB: the imports leave next to no cyclic garbage)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class PlannerGroup(GivenOnce, click.Group):
    """Turns every bad-input error into one line on stderr and exit code 2, never a traceback; its commands
    and groups take each option once (given_once)."""

    command_class = OnceCommand
    group_class = type

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from planner.cli.held import notes_held, say_error
        from planner.cli.spellings import pasted_character_hint
        from planner.cli.status import working

        args = list(sys.argv[1:] if args is None else args)
        if args[:1] == ["help"]:  # `megaplan help [COMMAND]`, as git reads it (fresh user trial 9: "No such command")
            args = [*args[1:], "--help"]
        args = _stdin_ranks_last(args)
        try:
            if hint := pasted_character_hint(args):
                raise PlannerError(hint)
            with notes_held(), working(args):
                rv = super().main(args, prog_name or "megaplan", complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:  # Ctrl-C: 128 + SIGINT, as a shell reports a command it interrupted
            click.echo("megaplan: aborted", err=True)
            sys.exit(130)
        except NO_ARGS_IS_HELP as err:  # `megaplan` alone (or a group alone): its help, as --help prints it
            click.echo(err.ctx.get_help() if err.ctx else err.format_message())
            sys.exit(0)
        except click.ClickException as err:
            message = err.format_message()
            if isinstance(err, click.NoSuchOption):
                from planner.cli.spellings import megatron_spelling_hint, single_dash_hint

                message = megatron_spelling_hint(err.option_name) or single_dash_hint(err, args) or message
            say_error(message)
            sys.exit(
                BAD_INPUT if err.exit_code == 2 or isinstance(err, click.UsageError) else err.exit_code or BAD_INPUT
            )
        except PlannerError as err:
            say_error(str(err))
            sys.exit(BAD_INPUT)
        except OSError as err:
            sys.exit(_output_failed(err))
        sys.exit(rv if isinstance(rv, int) else 0)


def _stdin_ranks_last(args: list[str]) -> list[str]:
    """`... --json | megaplan compare -#1 -#2`: two ranks of the piped search, which click took for an option
    ("No such option '-#'", fresh user trial 10); passed as ``<stdin>#N``, which the plan reader reads as ``-#N``."""
    import re

    if args[:1] != ["compare"]:
        return args
    return ["<stdin>" + a[1:] if re.fullmatch(r"-#\d+", a) else a for a in args]


def _output_failed(err: OSError) -> int:
    """The output could not be written (``> /dev/full``: no space left; a pipe closed early): one line on
    stderr and exit code 1, as ``cat`` reports it, never a traceback (fresh user trial 8). Standard output is
    pointed at /dev/null first, so Python's own flush at exit does not fail a second time. An OSError that
    names a file is another matter: it is said with the file's name."""
    import errno
    import os

    from planner.cli.held import say_error

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test runner's buffer)
        pass
    if err.errno == errno.EPIPE:  # `megaplan ... | head -1`: the reader has what it wanted
        return 1
    where = f"{err.filename}: " if err.filename else "cannot write the output: "
    say_error(f"{where}{err.strerror or err}")
    return 1


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="megaplan")
def cli() -> None:
    """megaplan: analytical parallelism planner for Megatron-LM training.

    \b
    Examples:
        megaplan search --model gpt3-175b --gpus 1024
        megaplan explain --model gpt3-175b --gpus 1024 --tp 8 --pp 16
        megaplan explain --megatron-args-file my_launch.sh
    """


cli.commands = _Commands(cli.commands)  # the command modules load on first use


def main() -> None:
    _closed_streams()
    _encodable_output()
    cli()


class _Closed:
    """Standard output or error the shell closed (``megaplan search ... >&-``): Python sets it to None, and the
    first print ended in an AttributeError traceback (fresh user trial 10). Written to, it fails as a closed
    descriptor does, so the output error says so in one line (exit 1); closed stderr drops the messages and
    keeps the exit code, as ``ls nope 2>&-`` does."""

    def __init__(self, name: str, silent: bool):
        self.name, self.silent, self.encoding = name, silent, "utf-8"

    def write(self, text: str) -> int:
        if self.silent:
            return len(text)
        import errno

        raise OSError(errno.EBADF, f"standard {self.name} is closed (>&-): redirect it to a file or /dev/null")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _closed_streams() -> None:
    if sys.stderr is None:
        sys.stderr = _Closed("error", silent=True)
    if sys.stdout is None:
        sys.stdout = _Closed("output", silent=False)


def _encodable_output() -> None:
    """Standard output and error in an encoding without the tables' characters (PYTHONIOENCODING=ascii or
    latin-1, an old terminal) print them as '?' instead of ending in a UnicodeEncodeError traceback (fresh
    user trial 8)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "·×≈…─".encode(stream.encoding or "ascii")
        except UnicodeEncodeError:
            stream.reconfigure(errors="replace")
        except (LookupError, AttributeError, ValueError):  # an unknown codec name, or no reconfigure
            pass


def console():
    """A rich console as wide as the terminal; output to a file or another program gets ``COLUMNS``
    columns when it is set, else the width of the terminal stderr shows (the pipe's user), else 160."""
    import os

    from rich.console import Console

    from planner.report.layout import console_width

    width = console_width(sys.stdout.isatty(), dict(os.environ), _stderr_columns())
    return Console(width=width) if width is None else Console(width=width, file=_NoTrailingSpaces(sys.stdout))


def _stderr_columns() -> int | None:
    """The columns of the terminal the command runs in when its output goes elsewhere: stderr's, else stdin's
    (``megaplan explain ... 2>&1 | less``); None when neither is a terminal (a script, CI)."""
    import os

    for stream in (sys.stderr, sys.stdin):
        try:
            if stream is not None and stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's), a closed one
            continue
    return None


class _NoTrailingSpaces:
    """Output to a file or another program without the spaces rich pads a line with or wraps it after:
    "… × seq 4096," rather than "… × seq 4096, " (a terminal shows none of them; a file keeps them)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        import re

        return self._stream.write(re.sub(r" +\n", "\n", text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def echo_json(data) -> None:
    from planner.report.json_out import json_text  # json: not on --version's or --help's path

    click.echo(json_text(data))


def overwrite_option(f):
    """--overwrite: replace an output file that exists (never done without it)."""
    return click.option("--overwrite", is_flag=True, help="Replace the output file if it exists.")(f)


def _stream(path: str) -> bool:
    """A character device or a pipe (-o /dev/null, -o >(gzip > f)): written to, nothing in it is replaced."""
    import os
    import stat

    mode = os.stat(path).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def refuse_existing(option: str, path: str | None, overwrite: bool) -> None:
    """Stop, before any work, when ``path`` (the file ``option`` names) exists and --overwrite is not given,
    or its folder does not exist or cannot be written."""
    import os

    if not path:
        return
    if os.path.isdir(path):
        raise PlannerError(f"{option} {path!r} is a folder; name the file to write")
    if os.path.exists(path) and not overwrite and not _stream(path):
        raise PlannerError(f"{option}: {path} exists; pass --overwrite to replace it")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "does not exist"
        raise PlannerError(f"{option} {path!r}: folder {folder!r} {what}")
    if not os.access(folder, os.W_OK):
        raise PlannerError(f"{option} {path!r}: cannot write there (permission denied)")


def one_output(**flags: bool) -> None:
    """Refuse output options that exclude each other (--json --csv): one line, exit 2."""
    given = [name for name, on in flags.items() if on]
    if len(given) > 1:
        raise PlannerError(f"{' and '.join(given)}: choose one output format")


def csv_option(f):
    """--csv: print a CSV table instead of the rich one (for spreadsheets); refused beside --json."""
    import functools

    @functools.wraps(f)
    def checked(*args, **kw):
        one_output(**{"--json": kw.get("as_json", False), "--csv": kw.get("as_csv", False)})
        return f(*args, **kw)

    return click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")(checked)


@contextmanager
def progress(label: str, total: int | None = None):
    """A progress bar on stderr while a long command runs, only when stderr is a terminal; yields
    ``step(description=None)`` to call as each unit of work finishes. The bar is drawn at each step, by this
    thread: rich's refreshing thread would keep the work in one process (``planner.parallel.can_fork``: a
    process with another thread is not forked)."""
    if not sys.stderr.isatty():
        yield lambda description=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    columns += [BarColumn(), MofNCompleteColumn()] if total else []
    from planner.cli import status
    from planner.cli.held import unheld

    screen = Console(file=unheld(sys.stderr), stderr=True)  # drawn past the held warnings (planner.cli.held)
    bar = Progress(*columns, TimeElapsedColumn(), console=screen, transient=True, auto_refresh=False)
    with status.paused(), bar:
        task = bar.add_task(label, total=total)

        def step(description=None):
            bar.update(task, advance=1, description=description or label)
            bar.refresh()

        yield step


@contextmanager
def naming_overrides(resolved):
    """An error about a plan built over a file (--plan, a launch script) names the options given over it,
    since notes are not said beside an error: "... exceeds max_position_embeddings 2048 (after: --model
    gpt3-175b overrides the plan file's llama3-8b)"."""
    try:
        yield
    except PlannerError as err:
        if not resolved.overrides:
            raise
        raise PlannerError(f"{err} (after: {'; '.join(resolved.overrides)})") from err


def say_notes(resolved) -> None:
    """The notes of a resolved plan (overrides, the plan search picked) on stderr."""
    for note in resolved.notes:
        click.echo(f"megaplan: {note}", err=True)


def say_warnings(ctx, gpus: int, pj: dict | None = None) -> None:
    """Warn on stderr about inputs that make the plan nonsensical (it is still estimated)."""
    from planner.space.warnings import input_warnings, plan_warnings

    for warning in input_warnings(ctx, gpus) + (plan_warnings(pj) if pj else []):
        click.echo(f"megaplan: warning: {warning}", err=True)


def examples_last(group: click.Group, only: click.Command | None = None) -> None:
    """Move each command's examples (or only ``only``'s) from its help text to the end of its --help, after
    the options."""
    for command in [only] if only is not None else [group, *group.commands.values()]:
        if command is None:
            continue
        _examples_to_epilog(command)
        if isinstance(command, click.Group) and command is not group:
            examples_last(command)


def _examples_to_epilog(command: click.Command) -> None:
    help_text = inspect.cleandoc(command.help or "")
    at = help_text.find("\b\nExample")
    if at >= 0:
        command.help, command.epilog = help_text[:at].rstrip(), help_text[at:]


_examples_to_epilog(cli)
