"""corral: schedules deep-learning training jobs on shared GPU clusters."""

__version__ = "0.1.0"
