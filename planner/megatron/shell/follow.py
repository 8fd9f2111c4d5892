"""Files a launch script reaches: ``source``/``.`` of a file, ``sbatch [options] FILE`` and
``bash FILE``, here-documents written to a file (a DeepSpeed JSON config) or fed to ``sbatch`` /
``bash``, and the Slurm variables a job sees.

Files are read through the caller's ``read_file`` (the importer's looks beside the script, by the
file's name); a file it cannot give, or any file when there is none (a command line given as
text), is recorded in ``unread`` so the importer can name it and ``--env``. Nothing is ever run.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from contextlib import contextmanager

from planner.errors import PlannerError
from planner.megatron.shell.expand import MAX_DEPTH
from planner.megatron.shell.fields import Field, Var, Variables
from planner.megatron.shell.launch import INT, ShellParseError, launch_options, sbatch_directives
from planner.megatron.shell.rewrite import HEREDOC

SHELLS = ("sh", "bash", "dash", "zsh")
SLURM_VARS = {  # what a Slurm job sees, from the job's options (sbatch command line and #SBATCH lines)
    "nnodes": ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
    "nproc": ("SLURM_NTASKS_PER_NODE",),
    "world": ("SLURM_NTASKS",),
}
_SBATCH_VALUE_OPTIONS = {"-p", "-A", "-t", "-N", "-n", "-J", "-o", "-e", "-c", "-w", "-x", "-C", "-q", "-G", "-D"}
_SBATCH_FLAGS = {  # sbatch's long options that take no value (sbatch(1)); every other one takes one
    "--exclusive",
    "--hold",
    "--parsable",
    "--requeue",
    "--no-requeue",
    "--overcommit",
    "--oversubscribe",
    "--spread-job",
    "--test-only",
    "--use-min-nodes",
    "--wait",
    "--contiguous",
    "--ignore-pbs",
    "--no-kill",
    "--quiet",
    "--verbose",
    "--help",
    "--usage",
    "--version",
    "--get-user-env",
    "--reboot",
    "--nice",
}
_SHELL_VALUE_OPTIONS = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}  # bash(1)
_NAME = re.compile(r"[A-Za-z_]\w*")


def _sbatch_takes_value(word: str) -> bool:
    """Whether an sbatch option word is followed by its value as the next word (``-p batch``, ``--nodes 2``)."""
    if word.startswith("--"):
        return "=" not in word and word not in _SBATCH_FLAGS
    return word in _SBATCH_VALUE_OPTIONS


def export_option(commands: list[list[Field]], option: str = "--export") -> Field | None:
    """The value of the last ``--export`` (or ``option``: ``--export-file``) among sbatch option lists (``#SBATCH``
    lines first, then the command line, which overrides them, as in sbatch(1)); the options of a command end at
    its script's file."""
    value = None
    for fields in commands:
        words, k = [t for t, _ in fields], 1
        while k < len(words) and words[k].startswith("-"):
            if words[k].startswith(option + "="):
                value = (words[k].partition("=")[2], fields[k][1])
            elif words[k] == option and k + 1 < len(words):
                value = fields[k + 1]
            k += 2 if _sbatch_takes_value(words[k]) else 1
    return value


def export_values(value: str) -> tuple[bool, dict[str, str | None]]:
    """``--export={[ALL,]NAME[=VALUE],...|ALL|NONE|NIL}`` (sbatch(1)): whether the submitting environment is
    passed (ALL), and the variables named, each with its value or None (the submitter's current value). A piece
    that is no variable name continues the value before it (``ARGS=a,b``)."""
    keep_all, out, last = False, {}, None
    for part in value.split(","):
        name, eq, val = part.partition("=")
        if part.upper() in ("ALL", "NONE", "NIL"):
            keep_all = keep_all or part.upper() == "ALL"
        elif _NAME.fullmatch(name):
            out[name], last = (val if eq else None), name
        elif last is not None and out[last] is not None:
            out[last] += "," + part
    return keep_all, out


_DISCARDED = ("DISPLAY", "ENVIRONMENT", "HOSTNAME")  # sbatch never passes these from a file (env.c, _discard_env)


def export_file_values(text: str, path: str) -> dict[str, str]:
    """The variables of an ``--export-file``: ``NAME=value`` entries separated by NUL characters (sbatch(1): "each
    separated by a null character"; Slurm's env.c ``env_array_from_file`` splits at NUL only and stops at an
    empty entry). A file without NUL is one entry to sbatch: one line (its newline dropped, as bash's word
    splitting drops it) is read; several lines would all be the first name's value, so they are refused."""
    if "\0" not in text and "\n" in text.rstrip("\n"):
        first = text.split("\n", 1)[0]
        raise PlannerError(
            f"sbatch --export-file={path}: its NAME=value lines are separated by newlines, but sbatch separates the "
            f"entries by NUL characters only (sbatch(1)) and would pass the whole file as one variable "
            f"({first.partition('=')[0]}); write it with NULs (printf 'TP=4\\0PP=2\\0' > {path}, or env -0)"
        )
    out = {}
    for entry in text.split("\0") if "\0" in text else [text.rstrip("\n")]:
        if not entry:
            break
        name, eq, value = entry.partition("=")
        if eq and _NAME.fullmatch(name) and name not in _DISCARDED:
            out[name] = value
    return out


@contextmanager
def file_named(path: str, how: str):
    """A file the script sources or runs that bash cannot parse is named in the one-line error, with the line when
    the parser knows it (the innermost file only): it was "unexpected EOF (at the end of the script)" for a
    ``source config.sh`` whose ``if`` has no ``fi``, naming neither the file nor its line (ux12)."""
    try:
        yield
    except ShellParseError as err:
        if getattr(err, "file", None) is not None:
            raise
        message = str(err).replace("at the end of the script", "at the end of the file")
        named = ShellParseError(f"{path} (which the script {how}): {message}")
        named.file = path
        raise named from None


class Follow:
    """Mixin of the interpreter: reading the files a script sources, submits or writes."""

    read_file: Callable[[str], str | None] | None
    files: dict[str, str]
    unread: list[str]
    directives: list[list[Field]]
    job: list[list[Field]]
    vars: dict[str, Var]
    exported: set[str]
    allexport: bool
    errexit: bool  # set -e
    funcs: dict[str, object]
    tables: dict[str, list]
    depth: int
    cwd: str | None  # the working directory, when known
    last_read: str  # the absolute path of the file read last
    moved: list[str]  # notes: files found above the script's folder, values from sbatch --export
    submitter: list[str]  # names sbatch --export passes from the submitting shell, unknown here

    def sibling(self, path: str, nul: bool = False) -> str | None:
        """The text of the file ``path`` names, from the caller's reader (or written by the script); None if it
        has none (or, without ``nul``, holds a NUL byte). A relative path found in a folder above the one the
        script runs in means the script runs from there: that folder becomes the working directory, and a note
        says so."""
        if path in self.files:
            return self.files[path]
        read = self.read_file if path else None
        got = None if read is None else read(path, self.cwd, nul=True) if nul else read(path, self.cwd)
        if got is None:
            return None
        text, self.last_read, run_dir = got
        if run_dir is not None:
            self.moved.append(f"read {path} from {run_dir}, a folder above the script's: the script runs from there")
            self.cwd = run_dir
        return text

    def read_or_note(self, path: str) -> str | None:
        """A file's text, or None after recording it as unread, or as too deep when files nest more than
        MAX_DEPTH levels (a file that sources itself: it was said to be "not on this machine")."""
        if self.depth >= MAX_DEPTH:
            self.too_deep.append(path)
            return None
        text = self.sibling(path)
        if text is None:
            self.unread.append(path)
        return text

    def run_in_this_shell(self, text: str) -> None:
        """Interpret a file's text with this shell's variables; its ``return`` ends only the file."""
        from planner.megatron.shell.interp import Return

        self.depth += 1
        try:
            self.run_text(text)
        except Return:
            pass
        finally:
            self.depth -= 1

    @contextmanager
    def positional(self, args: list[Field] | None):
        """``$1``..., ``$#`` and ``$@`` set to ``args`` while a function, a script run with arguments or a
        file sourced with arguments runs, and restored after (bash's semantics); None keeps them."""
        if args is None:
            yield
            return
        names = [k for k in self.vars if k.isdigit() or k in ("@", "#", "*")]
        saved = {k: self.vars.pop(k) for k in names}
        self.vars.update({str(k): Var(t, u) for k, (t, u) in enumerate(args, 1)})
        self.vars["#"] = Var(str(len(args)))
        self.vars["@"] = Var([t for t, _ in args], frozenset().union(*(u for _, u in args)))
        try:
            yield
        finally:
            for k in [k for k in self.vars if k.isdigit() or k in ("@", "#", "*")]:
                del self.vars[k]
            self.vars.update(saved)

    def source(self, fields: list[Field]) -> None:
        """``source FILE [ARGS]`` / ``. FILE [ARGS]``: run the file's text in this shell (with ARGS as its
        positional parameters when given), or record it as unread."""
        text = self.read_or_note(fields[1][0]) if len(fields) > 1 else None
        if text is not None:
            with self.positional(fields[2:] or None), file_named(fields[1][0], "sources"):
                self.run_in_this_shell(text)

    def script_argument(self, fields: list[Field]) -> tuple[str, list[Field]] | None:
        """The script file of ``sbatch [options] FILE [ARGS]`` or ``bash|sh [options] FILE [ARGS]`` and its
        arguments, as bash and sbatch read them: the first word that is not an option or an option's value
        (None without one)."""
        shell = posixpath.basename(fields[0][0]) in SHELLS
        i = 1
        while i < len(fields):
            word = fields[i][0]
            if word == "--":
                i += 1
                break
            if not word.startswith(("-", "+")) or word in ("-", "+"):
                break
            takes = word in _SHELL_VALUE_OPTIONS if shell else _sbatch_takes_value(word)
            i += 2 if takes else 1
        if i >= len(fields):
            return None
        return fields[i][0], fields[i + 1 :]

    def run_file(self, fields: list[Field]) -> bool:
        """Run the script a ``sbatch``/``bash``/``sh`` command names, beside this one, with the words after
        it as its positional parameters; False if there is none."""
        found = self.script_argument(fields)
        if found is None:
            return False
        path, args = found
        text = self.read_or_note(path)
        sbatch = posixpath.basename(fields[0][0]) in ("sbatch", "salloc")
        if text is not None:
            with self.child_process(), self.positional(args), file_named(path, "submits" if sbatch else "runs"):
                self.vars["0"] = Var(self.last_read)  # $0: the script's path
                self._run_child(text, sbatch=sbatch)
        return True

    def _run_child(self, text: str, sbatch: bool) -> None:
        """The child script; counting launches, its ``exit`` ends only the child, as in bash."""
        from planner.megatron.shell.interp import Stop

        try:
            self.run_job_text(text, sbatch)
        except Stop:
            if not self.count_only:
                raise

    @contextmanager
    def child_process(self):
        """A script run by ``bash FILE`` or submitted by ``sbatch``: a new process, which sees only the
        exported variables (``export``, ``set -a``, the command's own ``X=1``, the caller's ``--env``) and
        whose assignments and functions never come back to this shell."""
        saved = self.vars, set(self.exported), self.funcs, self.allexport, self.errexit
        kept = {k: v for k, v in self.vars.items() if k in self.exported or k in self.pinned}
        self.vars = Variables(kept, read=self.vars.read)
        self.funcs, self.errexit = {}, False
        try:
            yield
        finally:
            self.vars, self.exported, self.funcs, self.allexport, self.errexit = saved

    def run_job_text(self, text: str, sbatch: bool) -> None:
        """Interpret a job script: its #SBATCH lines join the directives and set the Slurm variables, and
        ``--export`` (the command line's, else its #SBATCH lines') the job's environment."""
        if sbatch:
            own = sbatch_directives(text)
            self.directives.extend(own)
            self.seed_slurm()
            self.seed_export(own, self.job[-1:])
        self.run_in_this_shell(text)

    def seed_export(self, directives: list[list[Field]], command: list[list[Field]] = ()) -> None:
        """sbatch ``--export`` (sbatch(1)): the command line's, else the submitter's SBATCH_EXPORT, else the #SBATCH
        lines'. The job's environment holds the variables it gives (``TP=4``), under the submitting environment's
        own with ALL; without ALL, none of the submitter's other variables; a name alone passes the submitter's
        value, unknown here unless set: left unresolved, for the error on a flag that needs it to name the
        variable (never a script's default instead). With ``--export-file`` the file's variables instead."""
        env = self.vars.get("SBATCH_EXPORT") if "SBATCH_EXPORT" in self.exported else None
        env_words = [("sbatch", frozenset()), ("--export", frozenset()), (env.value, env.unres)] if env else []
        option = export_option([*directives, *([env_words] if env and isinstance(env.value, str) else []), *command])
        env_file = export_option([*directives, *command], "--export-file")
        if env_file is not None:
            self.seed_export_file(env_file, option)
            return
        if option is None:
            return
        value, unres = option
        keep_all, values = export_values(value)
        if not keep_all:
            self.drop_submitter(values)
        given = []
        for name, val in values.items():
            if name in self.pinned or (name in self.exported and name in self.vars and (keep_all or val is None)):
                continue  # --env, or the submitter's own value (which ALL puts over the one given)
            self.vars[name] = Var(val, unres) if val is not None else Var("$" + name, frozenset({"$" + name}))
            self.exported.add(name)
            given += [f"{name}={val}"] if val is not None else []
            self.submitter += [] if val is not None else [name]
        if given:
            self.moved.append(f"{', '.join(given)} from sbatch --export={value} (the job's environment)")

    def drop_submitter(self, kept: dict[str, str | None]) -> None:
        """The submitting shell's variables leave the job's environment, except SLURM_*, --env and ``kept``."""
        for name in [n for n in self.vars if _NAME.fullmatch(n) and n not in kept and n not in self.pinned]:
            if not name.startswith("SLURM_"):
                del self.vars[name]
                self.exported.discard(name)

    def seed_export_file(self, env_file: Field, option: Field | None) -> None:
        """sbatch ``--export-file=FILE`` (sbatch(1); Slurm's sbatch.c): the job's environment is the file's
        variables, with ``--export``'s NAME=value pieces over them; sbatch unsets its own environment first ("if the
        environment is coming from a file, the environment at execution startup must be unset"), so none of the
        submitting shell's variables (ALL or a name alone) reach the job, SLURM_* and --env kept; ``--export=NONE``
        (or NIL) exactly drops the file's variables too."""
        path = env_file[0]
        values = export_file_values(self.export_file_text(env_file), path)
        self.drop_submitter({})
        dropped = option is not None and option[0].upper() in ("NONE", "NIL")
        given = {} if dropped else {k: Var(v) for k, v in values.items()}
        if option is not None and not dropped:
            given.update({k: Var(v, option[1]) for k, v in export_values(option[0])[1].items() if v is not None})
        given = {k: v for k, v in given.items() if k not in self.pinned}  # --env wins
        self.vars.update(given)
        self.exported.update(given)
        if dropped and values:
            self.moved.append(f"sbatch --export={option[0]} drops the variables of --export-file={path} (as sbatch)")
        elif given:
            shown = ", ".join(f"{k}={v.value}" for k, v in given.items())
            how = f" and --export={option[0]}" if option is not None else ""
            self.moved.append(f"{shown} from sbatch --export-file={path}{how} (the job's environment)")

    def export_file_text(self, env_file: Field) -> str:
        """The text of an ``--export-file``; a file descriptor (a number from 3, which sbatch reads as one), a
        path naming an unset variable or a file not found is refused (sbatch itself stops: "Could not open user
        environment file")."""
        path, unres = env_file
        text = None if unres else self.sibling(path, nul=True)
        if text is not None:
            return text
        if unres:
            why = f"names {', '.join(sorted(unres))}, which the script leaves unset"
        elif path.isdigit() and int(path) >= 3:
            why = "a file descriptor of the shell that runs sbatch, which megaplan cannot read"
        else:
            why = f"no such file where the job is submitted ({self.cwd or 'the script was given as text'})"
        raise PlannerError(
            f"sbatch --export-file={path}: {why}; --export-file takes a file of NUL-separated NAME=value entries "
            "(or pass the variables with --env NAME=VALUE)"
        )

    def seed_slurm(self) -> None:
        """Set SLURM_NNODES and friends from the job's options, unless the script or --env set them."""
        opts: dict[str, Field] = {}
        for fields in [*self.directives, *self.job]:
            launch_options(fields, opts)
        for key, names in SLURM_VARS.items():
            value = opts.get(key)
            if value is None or not INT.fullmatch(value[0].strip()):
                continue
            for name in names:
                if name not in self.vars:
                    self.vars[name] = Var(value[0].strip())
                    self.exported.add(name)  # the job's environment

    def heredoc(self, node, words: list[str], fields: list[Field]) -> bool:
        """A command with a here-document: written to a file (kept in ``files``), or a job script fed to
        sbatch/bash/sh (interpreted). Returns whether it handled the command."""
        redirects = [p for p in getattr(node, "parts", []) if p.kind == "redirect"]
        doc = next(
            (r for r in redirects if str(getattr(getattr(r, "output", None), "word", "")).startswith(HEREDOC)), None
        )
        if doc is None:
            return False
        body, quoted = self.tables["h"][int(doc.output.word[len(HEREDOC) :])]
        text = body if quoted else self.heredoc_text(body)
        target = next((r for r in redirects if r.type in (">", ">>") and hasattr(r.output, "word")), None)
        name = posixpath.basename(fields[0][0]) if fields else ""
        if target is not None:
            path = self.string(self.raw(target.output))
            self.files[path] = self.files.get(path, "") + text if target.type == ">>" else text
            return True
        if name in ("sbatch", "salloc") or (name in SHELLS and "-c" not in [t for t, _ in fields]):
            if name in ("sbatch", "salloc"):
                self.job.append(fields)
            with self.child_process():
                self.run_job_text(text, sbatch=name in ("sbatch", "salloc"))
            return True
        return False

    def heredoc_text(self, body: str) -> str:
        """An unquoted here-document's body with its variables expanded: a backslash escapes only ``$``, a
        backquote, a backslash and a newline (bash(1), Here Documents); quotes stay literal."""
        out, i = [], 0
        while i < len(body):
            if body[i] == "\\" and body[i + 1 : i + 2] in ("$", "`", "\\", "\n"):
                out.append(body[i : i + 2])
                i += 2
                continue
            out.append({"\\": "\\\\", '"': '\\"'}.get(body[i], body[i]))
            i += 1
        return "".join(t for t, _ in self.expand('"' + "".join(out) + '"', split=False))

    def envsubst(self, node, fields: list[Field]) -> bool:
        """``envsubst < IN > OUT``: OUT is IN with the exported variables it names substituted (kept in
        ``files``); the others stay ``${NAME}`` for the launch reader to name. Returns whether it handled it."""
        if not fields or posixpath.basename(fields[0][0]) != "envsubst":
            return False
        from planner.megatron.modelzoo import VARIABLE

        parts = getattr(node, "parts", [])
        redirects = {r.type: r for r in parts if r.kind == "redirect" and hasattr(r.output, "word")}
        if "<" in redirects and ">" in redirects:
            text = self.sibling(self.string(self.raw(redirects["<"].output)))
            env = {k: v.value for k, v in self.vars.items() if k in self.exported and isinstance(v.value, str)}
            env = {k: v for k, v in env.items() if not self.vars[k].unres}
            if text is not None:
                out = VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
                self.files[self.string(self.raw(redirects[">"].output))] = out
        return True
