"""Errors the library raises for bad input; the CLI turns each into one line and exit code 2."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 plan', '3 plans', '1,024 runs': a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


class PlannerError(ValueError):
    """Bad input: a message naming the field and what is allowed."""


class PresetError(PlannerError):
    """A preset name or YAML file that cannot be found, parsed or validated."""


class InfeasibleError(PlannerError):
    """A configuration that breaks a Megatron-LM rule or fits nowhere."""
