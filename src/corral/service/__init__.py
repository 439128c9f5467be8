"""corral.service: the live scheduler - the simulator's policies on real jobs.

store (SQLite state), jobs (a live job and its JobView), loop (the control loop), api (FastAPI
REST API), metrics (Prometheus), server (`corral serve`), client (the API client the CLI uses),
endpoint (data directory, token, address), submission (what a user submits). Needs the
`service` extra (fastapi, uvicorn, httpx, prometheus-client); not torch.
"""
