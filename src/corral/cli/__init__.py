"""The `corral` command."""
