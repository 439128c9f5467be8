"""Package data: the built-in catalog."""
