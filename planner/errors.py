"""Errors the library raises for bad input; the CLI turns each into one line and exit code 2."""


class PlannerError(ValueError):
    """Bad input: a message naming the field and what is allowed."""


class PresetError(PlannerError):
    """A preset name or YAML file that cannot be found, parsed or validated."""


class InfeasibleError(PlannerError):
    """A configuration that breaks a Megatron-LM rule or fits nowhere."""
