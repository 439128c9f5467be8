"""What the API's routes share (`ApiContext`) and who a request comes from (`access_checks`):
the admin (the service's token) or a queue's tenant (its token); the routes are in
corral.service.api (the service's own), api_jobs and api_queues."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.executors.base import Executor
from corral.service.kept_queues import KeptQueues
from corral.service.loop import ControlLoop
from corral.service.store import Store
from corral.service.tenants import ADMIN, Principal, Tenancy

__all__ = ["ApiContext", "access_checks"]

Check = Callable[..., Principal]


@dataclass
class ApiContext:
    """The service's parts every route group reads, and the two access dependencies."""

    store: Store
    executor: Executor
    loop: ControlLoop
    tenancy: Tenancy | None
    data_dir: Path | None
    kept: KeptQueues | None
    check_app: Callable[[str | None], None]
    authorized: Check
    admin_only: Check
    #: held while a job's queue is checked and it is stored, and while PUT /queues swaps
    tree_lock: threading.Lock = field(default_factory=threading.Lock)


def access_checks(token: str, tenancy: Tenancy | None) -> tuple[Check, Check]:
    """(authorized, admin_only): FastAPI dependencies giving the request's `Principal` (401
    without a known token; admin_only: 403 for a tenant's)."""
    bearer = HTTPBearer(auto_error=False)

    def authorized(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
        """The admin (the service's token) or a queue's tenant (its token); else 401."""
        if creds is not None:
            given = creds.credentials
            tenant = tenancy.principal(given) if tenancy is not None else None
            if hmac.compare_digest(given.encode(), token.encode()):
                return ADMIN
            if tenant is not None:
                return tenant
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token",
                            headers={"WWW-Authenticate": "Bearer"})

    def admin_only(who: Principal = Depends(authorized)) -> Principal:
        if not who.admin:
            raise HTTPException(403, f'this needs the admin token (this is queue "{who.queue}"\'s)')
        return who

    return authorized, admin_only
