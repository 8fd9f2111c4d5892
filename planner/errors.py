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
