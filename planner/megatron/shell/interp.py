"""The interpreter: walk bashlex trees tracking variables and find the Megatron-LM launch.

:class:`Interp` runs assignments, ``export``/``declare``/``unset``, ``[ ]``, ``[[ ]]`` and
``(( ))`` conditions, ``if``/``while``/``until``/``for``, ``&&``/``||``/``!``, functions,
``sh -c`` and ``eval`` strings, and stops at ``exit`` or the first launch of a ``pretrain_*.py``
/ ``train*.py`` entry point, which it turns into a :class:`LaunchLine` with the launcher's
process counts. No command is ever executed.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping
from contextlib import contextmanager

from planner.megatron.shell.conditions import Test
from planner.megatron.shell.expand import MAX_DEPTH, Expander
from planner.megatron.shell.fields import Field, Var
from planner.megatron.shell.follow import SHELLS, Follow
from planner.megatron.shell.launch import (
    INT,
    TORCH_ENV,
    TORCH_FLAGS,
    LaunchLine,
    ShellParseError,
    launch_options,
    process_count,
    torch_count,
)
from planner.megatron.shell.rewrite import ARITH, ARRAY, CASE, COND, Rewriter, parse, placed, placeholders, unwritten
from planner.megatron.shell.subst import Substitute

_KEYWORDS = {"if", "then", "elif", "else", "fi", "while", "until", "do", "done"}
_ENTRY = re.compile(r"^[\w.-]*(?:train|finetune)[\w.-]*\.py$")
_NOT_LAUNCH = {"echo", "printf", "cat", "mkdir", "cd", "ls", "rm", "cp", "mv", "tee", "touch"}
_MAX_STEPS, _MAX_LOOP = 20000, 256
_ASSIGN = re.compile(r"([A-Za-z_]\w*)(?:\[([^\]]*)\])?(\+?)=(.*)\Z", re.DOTALL)

# Transformer Engine's attention-backend switches ("0" turns one off: dot_product_attention/utils.py
# get_attention_backend), read where the launch runs them (importer.attention_env_options)
TE_ATTENTION_ENV = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN")


_PYTHON = re.compile(r"python[\d.]*|torchrun|torch\.distributed\.(?:run|launch)|deepspeed")
_TOOLS = {"pip", "venv", "ensurepip", "setup.py", "http.server", "json.tool"}  # Python's own tools, not programs
_MODULE = re.compile(r"-[A-Za-z]*m")  # python -m, -um: run a module


def _as_file(entry: str) -> str:
    """An entry point's file name: a module (``examples.mimo.pretrain_mimo``) as its last part with ``.py``."""
    name = posixpath.basename(entry)
    return name if name.endswith(".py") else name.rpartition(".")[2] + ".py"


def _entry_at(texts: list[str], k: int) -> tuple[str | None, int]:
    """The entry point a command runs at word ``k``, and how many words it takes: a ``.py`` file, or the
    module after ``python -m`` / ``torchrun -m`` (not the launcher module torch.distributed.run itself)."""
    text = texts[k]
    if text.endswith(".py") and "=" not in text:
        return text, 1
    if _MODULE.fullmatch(text) and k + 1 < len(texts) and k > 0:
        module = texts[k + 1]
        launched = any(_PYTHON.fullmatch(posixpath.basename(t)) for t in texts[:k])
        if launched and re.fullmatch(r"[A-Za-z_][\w.]*", module) and not _PYTHON.fullmatch(module):
            return module, 2
    return None, 0


class Stop(Exception):
    """``exit``, a found launch or the step limit: stop interpreting."""


class Return(Exception):
    """``return`` from a function."""


class Interp(Substitute, Follow, Expander):
    """Walk bashlex trees tracking variables only; record the first Megatron-LM launch."""

    def __init__(self, env: Mapping[str, str], directives: list[list[Field]], read_file=None) -> None:
        super().__init__(env)
        self.directives, self.job = directives, []
        self.read_file, self.files, self.unread, self.too_deep = read_file, {}, [], []
        self.cwd, self.last_read, self.moved = getattr(read_file, "base_dir", None), "", []
        self.submitter: list[str] = []
        if getattr(read_file, "script", None) and "0" not in self.vars:
            self.vars["0"] = Var(read_file.script)  # $0: the script's own path
        self.seed_slurm()
        self.seed_export(self.directives)
        self.funcs: dict[str, object] = {}
        self.src, self.prefix, self.flags = "", [], []
        self.others: list[str] = []  # Python programs run that are no pre-training entry point
        self.launch: LaunchLine | None = None
        self.count_only, self.launches = False, 0  # count every launch instead of stopping at the first
        self.steps = self.depth = 0
        self.exited = self.errexit = self.returned = False
        self.said = self.exit_said = ""  # the last echo, and the last echo before the script's exit

    # -- walking the tree ---------------------------------------------------------------
    def run_text(self, text: str) -> None:
        try:
            rewritten, _ = Rewriter(placeholders(text, self.tables), self.tables).scan(0, "top")
            trees = parse(rewritten, self.tables, text) if rewritten.strip() else []
        except ShellParseError as err:
            raise ShellParseError(placed(str(err), text)) from None
        saved, self.src = self.src, rewritten
        try:
            for tree in trees:
                if not self.run(tree) and self.errexit and tree.kind == "command" and self.returned:
                    self.exited, self.exit_said = True, self.said  # set -e: a function that failed ends the script
                    raise Stop
        finally:
            self.src = saved

    def nested(self, text: str, prefix: list[Field]) -> None:
        """Interpret a ``sh -c`` or ``eval`` string, its launcher words prefixed."""
        if self.depth >= MAX_DEPTH:
            return
        saved, self.prefix = self.prefix, self.prefix + prefix
        self.depth += 1
        try:
            self.run_text(text)
        except ShellParseError:
            pass
        except Stop:
            if self.launch is not None:
                raise
        finally:
            self.prefix, self.depth = saved, self.depth - 1

    def run_prefixed(self, prefix: list[Field], fields: list[Field]) -> bool:
        """``srun [options] bash FILE [ARGS]``: the file run by a shell under a launcher, its launcher words
        prefixed (as for ``sh -c``); False if the shell names no file."""
        saved, self.prefix = self.prefix, self.prefix + prefix
        try:
            return self.run_file(fields)
        finally:
            self.prefix = saved

    def raw(self, node) -> str:
        return self.src[node.pos[0] : node.pos[1]]

    def run(self, node) -> bool:
        """Interpret one node; return its exit status as a bool."""
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise Stop
        kind = node.kind
        if kind == "command":
            return self.command(node)
        if kind in ("list", "compound", "pipeline"):
            return self.sequence(node.list if kind == "compound" else node.parts)
        if kind in ("if", "while", "until"):
            return self.branch(node.parts)
        if kind == "for":
            return self.run_for(node.parts)
        if kind == "function":
            self.funcs[node.name.word] = node.body
        return True

    def run_nodes(self, nodes: list) -> bool:
        status = True
        for node in nodes:
            status = self.run(node)
        return status

    def sequence(self, parts: list) -> bool:
        status, skip, negate = True, False, False
        for p in parts:
            if p.kind == "operator":
                skip = (p.op == "&&" and not status) or (p.op == "||" and status)
            elif p.kind == "reservedword":
                negate = negate != (p.word == "!")
            elif p.kind != "pipe" and not skip:
                status = self.run(p)
        return status != negate

    def branch(self, parts: list) -> bool:
        """``if``/``elif``/``else``, or one pass of a ``while``/``until`` loop."""
        segments: list[tuple[str, list]] = []
        for p in parts:
            if p.kind == "reservedword" and p.word in _KEYWORDS:
                segments.append((p.word, []))
            elif segments:
                segments[-1][1].append(p)
        for k, (word, nodes) in enumerate(segments):
            body = segments[k + 1][1] if k + 1 < len(segments) else []
            if word in ("if", "elif", "while", "until"):
                if self.run_nodes(nodes) != (word == "until"):
                    return self.run_nodes(body)
                if word in ("while", "until"):
                    return True
            elif word == "else":
                return self.run_nodes(nodes)
        return True

    def run_for(self, parts: list) -> bool:
        items, body, mode = None, [], ""
        for p in parts[2:]:
            if p.kind == "reservedword" and p.word in ("in", "do", "done", ";", "{", "}"):
                mode, items = p.word, [] if p.word == "in" else items
            elif mode == "in" and p.kind == "word":
                items.extend(self.expand(self.raw(p)))
            elif mode in ("do", "{"):
                body.append(p)
        for text, unres in (items or [])[:_MAX_LOOP]:
            self.set_var(parts[1].word, text, unres)
            self.run_nodes(body)
        return True

    # -- simple commands ----------------------------------------------------------------
    def command(self, node) -> bool:
        words = [self.raw(p) for p in node.parts if p.kind == "word"]
        assigns = [self.raw(p) for p in node.parts if p.kind == "assignment"]
        while words and re.match(r"[A-Za-z_]\w*\[[^\]]*\]\+?=", words[0]):
            assigns.append(words.pop(0))  # bashlex reads X[i]=v as a word
        marker = self.marker(words) if words else None
        if marker is not None:
            return marker
        fields = [f for w in words for f in self.expand(w)]
        if not fields:
            self.said = ""
            for raw in assigns:
                self.assign(raw)
            return True
        with self.command_env(assigns):
            if self.heredoc(node, words, fields) or self.envsubst(node, fields):
                return True
            if fields[0][0] in ("mapfile", "readarray"):
                return self.mapfile(node, fields)
            return self.builtin(words, fields)

    @contextmanager
    def command_env(self, assigns: list[str]):
        """``X=1 Y=2 cmd``: the assignments hold for that one command (a launch, a script it runs, a function
        it calls) and are undone after, as bash does."""
        names = [m.group(1) for m in map(_ASSIGN.match, assigns) if m]
        saved = {n: self.vars.get(n) for n in names if n not in self.pinned}
        added = set(names) - self.exported
        for raw in assigns:
            self.assign(raw)
        self.exported |= added  # in the command's environment
        try:
            yield
        finally:
            self.exported -= added
            for name, old in saved.items():
                if old is None:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = old

    def marker(self, words: list[str]) -> bool | None:
        """Run a rewritten array assignment, ``[[``, ``case`` or ``((`` command."""
        head = words[0]
        if ARRAY in words:
            at = words.index(ARRAY)
            if any(w.startswith("-") and "A" in w for w in words[1:at]) and at + 1 < len(words):
                self.assoc.add(words[at + 1])
            self.assign_array(words[at + 1 :])
            return True
        if head == COND:
            args = [self.string(w, blank=True) for w in words[1:]]
            return Test(args[:-1] if args[-1:] == ["]]"] else args, True, self.vars).run()
        if head == CASE and len(words) > 1:
            subject = self.string(words[1], blank=True)
            patterns = [self.string(p, blank=True) for p in words[2:]]
            return any(fnmatch.fnmatchcase(subject, p) for p in patterns)
        if head == ARITH:
            value = self.string(words[1]) if len(words) > 1 else ""
            return bool(INT.fullmatch(value)) and int(value) != 0
        return None

    def declare(self, name: str, words: list[str]) -> None:
        """``export``/``declare``/``typeset``/``local``/``readonly``: assignments, associative arrays (-A),
        name references (-n), exported names (export, -x)."""
        exports = name == "export" or any(w.startswith("-") and "x" in w for w in words[1:])
        options = "".join(w[1:] for w in words[1:] if w.startswith("-"))
        for raw in words[1:]:
            m = _ASSIGN.match(raw)
            if "A" in options and (m or re.fullmatch(r"[A-Za-z_]\w*", raw)):
                self.assoc.add(m.group(1) if m else raw)
            if m and "n" in options:  # a name reference: the variable it names, shared
                target = self.vars.get(self.string(m.group(4)))
                if target is not None and m.group(1) not in self.pinned:
                    self.vars[m.group(1)] = target
            elif m:
                self.assign(raw)
            if exports and (m or re.fullmatch(r"[A-Za-z_]\w*", raw)):
                self.exported.add(m.group(1) if m else raw)

    def set_options(self, flags: list[str]) -> None:
        """``set -a``/``set -o allexport`` and ``set -e``/``set -o errexit`` (``+`` turns them off)."""
        if "allexport" in flags or any(re.fullmatch(r"[-+][a-zA-Z]*a[a-zA-Z]*", f) for f in flags):
            self.allexport = any(f.startswith("-") for f in flags)
        if "errexit" in flags or any(re.fullmatch(r"[-+][a-zA-Z]*e[a-zA-Z]*", f) for f in flags):
            self.errexit = any(f.startswith("-") for f in flags)

    def builtin(self, words: list[str], fields: list[Field]) -> bool:
        name = fields[0][0]
        if name not in ("echo", "printf", "exit", "return", ">&2"):
            self.said = ""  # only an echo right before the exit says why it stopped
        if name in ("export", "declare", "typeset", "local", "readonly"):
            self.declare(name, words)
        elif name == "set" and len(fields) > 1:
            self.set_options([t for t, _ in fields[1:]])
        elif name in ("[", "test") and words[0] == name:
            args = [t for w in words[1:] for t, _ in self.expand(w, blank=True)]
            if name == "[" and args[-1:] != ["]"]:
                return False
            return Test(args[:-1] if name == "[" else args, False, self.vars).run()
        elif name in ("echo", "printf"):
            self.said = _plain(" ".join(t for t, _ in fields[1:] if not t.startswith("-")))[:200]
        elif name in ("false", "exit", "return"):
            if name == "exit" and not self.exited:
                self.exit_said = self.said  # what the script printed last before it stopped: usually why
            self.exited = self.exited or name == "exit"
            if name == "return":
                self.returned = len(fields) > 1 and fields[1][0].strip() not in ("", "0")
            if name != "false":
                raise Stop if name == "exit" else Return
            return False
        elif name == "unset":
            for text, _ in fields[1:]:
                if text not in self.pinned:
                    self.vars.pop(text, None)
        elif name == "let":  # each argument an arithmetic expression; true if the last is not 0
            values = [self.arith(raw)[0] for raw in words[1:]]
            return bool(values) and values[-1] not in (None, 0)
        elif name == "eval":
            self.nested(" ".join(t for t, _ in fields[1:]), [])
        elif name in (".", "source"):
            self.source(fields)
        elif name in self.funcs:
            return self.call(name, fields)
        else:
            base = posixpath.basename(name)
            if base in ("sbatch", "salloc"):
                self.job.append(fields)
                self.seed_slurm()
            if base in ("sbatch", *SHELLS) and "-c" not in [t for t, _ in fields] and self.run_file(fields):
                return True
            self.detect(fields)
        return True

    def mapfile(self, node, fields: list[Field]) -> bool:
        """``mapfile``/``readarray [-t] [-n N] [-s N] [-d D] NAME``: the lines of the file it reads (``< FILE``, read
        as ``source`` reads one) or of a here-string (``<<< WORD``) into the array. Standard input (a pipe) and
        ``< <(command)`` are never run: the array is left empty, and said (``unevaluated``)."""
        args = [t for t, _ in fields[1:]]
        opts, name, k = {"-t": False, "-n": "0", "-s": "0", "-d": "\n"}, "MAPFILE", 0
        while k < len(args):
            if args[k] in ("-n", "-s", "-d", "-O", "-u", "-C", "-c") and k + 1 < len(args):
                opts[args[k]], k = args[k + 1], k + 2
                continue
            if args[k].startswith("-"):
                opts["-t"] = opts["-t"] or "t" in args[k]
            else:
                name = args[k]
            k += 1
        text, source = self.redirected_input(node)
        command = unwritten(f"{fields[0][0]} {' '.join(args)} {source}", "", self.tables)
        if text is None or any(o in opts for o in ("-O", "-u", "-C", "-c")):
            self.unevaluated.append(command)
            self.unfilled[name] = command
            return True
        delim = opts["-d"][:1] or "\0"
        lines = [line + delim for line in text.split(delim)]
        lines[-1] = lines[-1][:-1]
        lines = [line[: -len(delim)] if opts["-t"] and line.endswith(delim) else line for line in lines if line]
        skip, count = (int(opts[o]) if opts[o].isdigit() else 0 for o in ("-s", "-n"))
        self.set_var(name, lines[skip : skip + count if count else None], frozenset())
        return True

    def redirected_input(self, node) -> tuple[str | None, str]:
        """What a command reads on its standard input, when megaplan can know it (a file, a here-string), and the
        redirection as written."""
        for part in getattr(node, "parts", []):
            if part.kind != "redirect" or part.type not in ("<", "<<<"):
                continue
            raw = self.raw(part.output)
            if part.type == "<<<":
                return self.string(raw) + "\n", f"<<< {raw}"
            if raw.startswith("<("):
                return None, f"< {raw}"
            return self.read_or_note(self.string(raw)), f"< {raw}"
        return None, "(standard input)"

    def call(self, name: str, fields: list[Field]) -> bool:
        """Run a shell function with its positional parameters set; False if it returned a failure
        (``return N``, N ≠ 0)."""
        if self.depth >= MAX_DEPTH:
            return True
        self.depth += 1
        self.returned = False
        try:
            with self.positional(fields[1:]):
                self.run(self.funcs[name])
        except Return:
            pass
        finally:
            self.depth -= 1
        return not self.returned

    def detect(self, fields: list[Field]) -> None:
        """Record a Megatron-LM launch (or a line of bare flags) in an expanded command."""
        texts = [t for t, _ in fields]
        if posixpath.basename(texts[0]) in _NOT_LAUNCH:
            return
        for k, text in enumerate(texts):
            if posixpath.basename(text) in SHELLS:
                j = k + 1  # skip the shell's options (-x, -e, -l ...) up to -c or a combined -xc / -lc
                while j < len(texts) and texts[j].startswith("-") and not texts[j].endswith("c"):
                    j += 1
                if j + 1 < len(texts) and texts[j].startswith("-") and texts[j].endswith("c"):
                    self.nested(texts[j + 1], fields[:k])
                    return
                if k > 0 and self.run_prefixed(fields[:k], fields[k:]):
                    return
            entry, skip = _entry_at(texts, k)
            if entry is not None and _ENTRY.match(_as_file(entry)):
                if self.count_only:
                    self.launches += 1
                    return
                self.launch = self.make_launch(self.prefix + fields[:k], fields[k + skip :], entry)
                raise Stop
            ran = k == 0 or any(_PYTHON.fullmatch(posixpath.basename(t)) for t in texts[:k])
            if entry is not None and ran and entry not in self.others and entry not in _TOOLS:
                self.others.append(entry)  # a Python program that is no pre-training entry point (said if none is)
        if texts[0].startswith("-"):
            self.flags.extend(fields)

    def torch_counts(self, launcher: list[Field], opts: dict[str, Field], unresolved: dict, defaults: list[str]):
        """torchrun's processes per node and nodes (``launch.torch_count``), from its options or, where none gives
        them, PET_NPROC_PER_NODE / PET_NNODES (the script's, or the command's own NAME=VALUE prefix), which torchrun
        reads as its defaults (they were read as its default of 1 process per node), each said in a note. A
        --standalone rendezvous (localhost) with more than one node is no world size: torchrun waits for nodes that
        cannot join (``script.world_unknown`` says so)."""
        prefix = {t.partition("=")[0]: (t.partition("=")[2], u) for t, u in launcher if "=" in t and t[:1] != "-"}
        for key, name in TORCH_ENV.items():
            var = self.vars.get(name)
            given = prefix.get(name) or ((var.value, var.unres) if var and isinstance(var.value, str) else None)
            if key not in opts and given is not None:
                opts[key] = given
                defaults.append(f"torchrun's {TORCH_FLAGS[key]} from {name}={given[0]} (torchrun's default from it)")
        nproc, nnodes = (torch_count(opts.get(k), k, unresolved, defaults) for k in ("nproc", "nnodes"))
        if nnodes is not None and nnodes > 1 and any(t == "--standalone" for t, _ in launcher):
            opts["nnodes"] = (f"{opts['nnodes'][0]} with --standalone", opts["nnodes"][1])
            nnodes = None
        return nproc, nnodes

    def make_launch(self, launcher: list[Field], argv: list[Field], entry: str | None) -> LaunchLine:
        unresolved = dict.fromkeys(u for _, us in argv for u in sorted(us))
        opts: dict[str, Field] = {}
        torch = False
        for fields in [*self.directives, *self.job, launcher]:
            torch = launch_options(fields, opts) or torch
        deepspeed = any(posixpath.basename(t) == "deepspeed" for t, _ in launcher)
        defaults: list[str] = []
        nproc, nnodes, world = (process_count(opts.get(k), unresolved) for k in ("nproc", "nnodes", "world"))
        if torch:
            nproc, nnodes = self.torch_counts(launcher, opts, unresolved, defaults)
        single_node = torch or (deepspeed and "hostfile" not in opts)
        if torch and "nproc" not in opts and not any(u for _, u in launcher):
            nproc = 1  # torchrun's --nproc-per-node defaults to 1 (torch/distributed/run.py)
            defaults.append("torchrun without --nproc-per-node: 1 process per node (its default)")
        if nnodes is None and single_node and nproc is not None and "nnodes" not in opts:
            nnodes = 1  # torchrun's default; the deepspeed launcher without a hostfile runs on this node
        if nproc is not None and nnodes is not None:
            world = nproc * nnodes
        elif world is None and isinstance(self.vars.get("WORLD_SIZE", Var([])).value, str):
            var = self.vars["WORLD_SIZE"]
            world = process_count((var.value, var.unres), unresolved)
            if world is None:  # named in world_unknown (fresh user trial 10: "no ... WORLD_SIZE", of a script with it)
                opts["world"] = (f"WORLD_SIZE={var.value}", var.unres)
        if nnodes is None and world and nproc and world % nproc == 0:
            nnodes = world // nproc
        if nproc is None and world and nnodes and world % nnodes == 0:
            nproc = world // nnodes
        counts = {k: opts[k] for k in ("nproc", "nnodes", "world", "hostfile") if k in opts}
        alloc = self.vars.get("PYTORCH_CUDA_ALLOC_CONF", Var([])).value
        backends = {k: self.vars[k].value for k in TE_ATTENTION_ENV if k in self.vars and k in self.exported}
        return LaunchLine(
            [t for t, _ in argv],
            nproc,
            nnodes,
            world,
            list(unresolved),
            entry,
            argv_unresolved=[u for _, u in argv],
            files=dict(self.files),
            unread=list(dict.fromkeys(self.unread)),
            too_deep=list(dict.fromkeys(self.too_deep)),
            launcher=" ".join(t for t, _ in launcher),
            counts={k: v[0] for k, v in counts.items()},
            allocator_conf=alloc if isinstance(alloc, str) else None,
            attention_env={k: v.strip() for k, v in backends.items() if isinstance(v, str)},
            defaults=defaults,
            notes=list(dict.fromkeys(self.moved)),
            env_unread=sorted(self.pinned - self.vars.read),
            unevaluated=list(dict.fromkeys(self.unevaluated)),
            unfilled=dict(self.unfilled),
            from_submitter=list(dict.fromkeys(self.submitter)),
        )

    # -- variables ----------------------------------------------------------------------
    def assign(self, raw: str) -> None:
        m = _ASSIGN.match(raw)
        if m:
            name, index, plus, value = m.groups()
            fields = self.expand(value, split=False)
            unres = frozenset().union(*(u for _, u in fields))
            self.set_var(name, "".join(t for t, _ in fields), unres, bool(plus), index)

    def assign_array(self, words: list[str]) -> None:
        if len(words) >= 2:
            fields = [f for w in words[2:] for f in self.expand(w)]
            unres = frozenset().union(*(u for _, u in fields))
            if words[0] in self.assoc:  # ([key]=value ...)
                pairs = [re.fullmatch(r"\[([^\]]*)\]=(.*)", t, re.DOTALL) for t, _ in fields]
                table = {m.group(1): m.group(2) for m in pairs if m}
                old = self.vars.get(words[0])
                if words[1] == "+=" and old is not None and isinstance(old.value, dict):
                    table = {**old.value, **table}
                if words[0] not in self.pinned:
                    self.vars[words[0]] = Var(table, unres)
                return
            self.set_var(words[0], [t for t, _ in fields], unres, words[1] == "+=")


_COLOUR = re.compile(r"(?:\\033|\\e|\\x1[bB]|\\u001[bB]|\x1b)\[[0-9;]*[A-Za-z]")


def _plain(text: str) -> str:
    """What echo or printf shows, without its colour codes (written \\033[0;31m, \\e[1m or the escape character
    itself) and the escaped newlines at its end: fresh user trial 10, Megatron-LM's modelopt arguments.sh printed
    as "\\033[0;31mERROR: \\033[0;37m Variable \\033[0;35mSCRIPT_DIR\\033[0;37m must be set!\\n"."""
    text = _COLOUR.sub("", text)
    while text.endswith(("\\n", "\n")):
        text = text[: -2 if text.endswith("\\n") else -1]
    return " ".join(text.split())
