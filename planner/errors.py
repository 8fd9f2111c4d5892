"""Errors the library raises for bad input; the CLI turns each into one line and exit code 2."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 plan', '3 plans', '1,024 runs': a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


class PlannerError(ValueError):
    """Bad input: a message naming the field and what is allowed."""


class PresetError(PlannerError):
    """A preset name or YAML file that cannot be found, parsed or validated."""


def refuse_device(path, what: str) -> None:
    """Refuse a device or socket given as an input file (/dev/zero, /dev/urandom): reading one never ends.
    A regular file, a pipe (`<(...)`, /dev/stdin fed by a pipe or a file) and a missing path pass (the
    caller says 'not found' in its own words)."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise PlannerError(f"{what} {str(path)!r} is a device or socket, not a file: give a file (or a pipe)")


class InfeasibleError(PlannerError):
    """A configuration that breaks a Megatron-LM rule or fits nowhere."""


class PinsBreakRuleError(InfeasibleError):
    """Pins that divide the world but leave no candidate: the plan of the pinned knobs breaks a rule on its own
    (--pp 1 --vpp 2), whatever the GPU count (``search.search``; --min-gpus says it instead of its largest size)."""


# dashes a word processor or web page puts where a command line has hyphens: ‐ ‑ ‒ – — ― − (fresh user trial 9)
TYPOGRAPHIC_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"


def typographic_dash_hint(word: str) -> str | None:
    """``—gpus`` (an option pasted from a document): what to type instead, or None."""
    bare = word.lstrip("-" + TYPOGRAPHIC_DASHES)
    dashes = word[: len(word) - len(bare)]
    if not (bare[:1].isalpha() and any(d in TYPOGRAPHIC_DASHES for d in dashes)):
        return None
    typed = next(d for d in dashes if d in TYPOGRAPHIC_DASHES)
    name = bare.split()[0]
    return f"'{dashes}{name}' begins with a typographic dash ({typed}), not two hyphens: type --{name}"


def url_hint(path: str) -> str:
    """A web address given as a file (a GitHub link pasted whole, fresh user trial 10): megaplan reads local files."""
    if not path.lower().startswith(("http://", "https://", "ftp://")):
        return ""
    raw = path
    if "://github.com/" in path and "/blob/" in path:  # the file itself, not GitHub's page of it
        raw = path.replace("://github.com/", "://raw.githubusercontent.com/").replace("/blob/", "/", 1)
    return f" (a web address: megaplan reads local files; download it first, e.g. curl -LO {raw})"
