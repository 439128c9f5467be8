"""Errors a user can cause: the CLI prints them as one line, without a traceback."""


class CorralError(Exception):
    """Base of every user-facing error (bad input, impossible request)."""


class InputError(CorralError):
    """A malformed or missing input file, row or value; the message names where."""


class UnknownPolicyError(CorralError):
    """A policy name or policy parameter that is not registered."""


class InfeasibleJobError(CorralError):
    """A job that can never fit on the cluster it was submitted to."""


class DecisionError(CorralError):
    """A policy returned a decision the cluster cannot carry out (e.g. over-allocated node)."""
