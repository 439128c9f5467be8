"""The simulator's loop: the engine, simulated jobs, resize mechanisms and run results."""
