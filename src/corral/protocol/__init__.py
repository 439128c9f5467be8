"""corral.protocol: the contract between an executor and the job it runs, torch-free.

Both sides import it (executors and service; `corral.train` inside the job), so it imports
neither: `env` (worker environment, `JobConfig`, exit statuses), `report` (the progress report,
`Reporter`, `write_report`), `inplace` (in-place resize handshake), `early` (the start gate of
early initialisation) and `files` (crash-safe writes the others use).
"""
