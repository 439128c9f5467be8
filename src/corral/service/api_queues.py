"""The API's queue routes: GET /queues (each queue a token sees, its use, the changes made to
it) and PUT /queues (the admin's: a new tree, checked whole, in force from the next round)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from corral.core.errors import InputError
from corral.core.queues import parse_queues, type_capacity
from corral.service.api_context import ApiContext
from corral.service.kept_queues import STORED
from corral.service.openapi import errors
from corral.service.tenants import (
    DROP_PARAM,
    TOKENS_DIR,
    Principal,
    Tenancy,
    change_seen_by,
    check_change,
    check_drops,
    check_run_as,
    check_tree_names,
    open_for_run_as,
    queue_rows,
    tree_diff,
)

__all__ = ["add_queue_routes"]

QUEUE_CHANGES_SHOWN = 20  # the newest `queues-changed` events GET /queues returns


def add_queue_routes(app: FastAPI, ctx: ApiContext) -> None:
    """The queue routes on `app` (400, one line, on a service without queues)."""
    store, executor, loop, tenancy = ctx.store, ctx.executor, ctx.loop, ctx.tenancy
    authorized, admin_only, tree_lock = ctx.authorized, ctx.admin_only, ctx.tree_lock
    data_dir, kept = ctx.data_dir, ctx.kept

    def queues_or_400() -> Tenancy:
        if tenancy is None:
            raise InputError("this service runs without queues (start it with corral serve "
                             "--queues FILE)")
        return tenancy

    @app.get("/queues", operation_id="getQueues", responses=errors(400, 401))
    def queues(who: Principal = Depends(authorized)) -> dict[str, Any]:
        t = queues_or_400()
        tree = t.tree
        used, active, waiting, by_type = loop.queue_usage()
        last = getattr(loop.policy, "last_shares", None)
        rows = queue_rows(tree, used, active, waiting,
                          dict(last.share) if last is not None else None, who, by_type)
        others = [0] * len(loop.cluster.nodes)  # GPUs per node other queues' jobs hold
        with loop.lock:
            for j in loop.jobs.values():
                if not who.sees(j.spec.queue):
                    for n, g in j.placement.slots:
                        if n < len(others):
                            others[n] += g
        changes = [{"time_s": e["time_s"], "detail": seen} for e in
                   store.service_events("queues-changed", QUEUE_CHANGES_SHOWN)
                   if (seen := change_seen_by(e["detail"], who)) is not None]
        return {"queues": rows, "total_gpus": loop.cluster.total_gpus,
                "other_queues_gpus_per_node": others, "changes": changes,
                "min_runtime_s": tree.min_runtime_s,
                "usage_half_life_s": tree.usage_half_life_s}

    @app.put("/queues", dependencies=[Depends(admin_only)], operation_id="putQueues",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "text/plain": {"schema": {"type": "string", "minLength": 1,
                                           "description": "a queues file (TOML)"}}}}},
             responses=errors(400, 401, 403, 422, 500))
    async def put_queues(request: Request, drop_queues: bool = Query(
            False, alias=DROP_PARAM, description="confirms that queues the new tree lacks are "
            "dropped (their tokens stop working); without it such a tree is refused (400)")
                         ) -> dict[str, Any]:
        body = await request.body()
        return await run_in_threadpool(_swap_queues, body, drop_queues)

    def _swap_queues(body: bytes, drop: bool) -> dict[str, Any]:
        t = queues_or_400()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("PUT /queues: the body is not UTF-8 TOML text") from None
        if not text.strip():
            raise InputError("PUT /queues: the body is empty: send the whole queues file "
                             "(TOML); nothing changed")
        with tree_lock:
            new = parse_queues(text, "PUT /queues", loop.cluster.total_gpus,
                               type_capacity(loop.cluster))
            check_tree_names(new)
            check_change(new, store.active_by_queue())
            if data_dir is not None:
                check_run_as(new, data_dir, executor.name)
                open_for_run_as(new, data_dir)
            old = t.tree
            check_drops(old, new, drop)
            diff = tree_diff(old, new)
            if kept is not None:  # kept before it is in force: a tree not kept is not swapped
                try:
                    kept.save(new)
                except OSError as exc:
                    raise HTTPException(500, f"PUT /queues: cannot keep the new tree in "
                                        f"DATA_DIR/{STORED} ({exc.strerror or exc}): the old "
                                        "one stays") from None
            t.tree = new
            loop.set_queues(new, diff)
        minted = t.mint(data_dir, store) if data_dir is not None else []
        return {"changed": diff, "new_tokens": [f"{TOKENS_DIR}/{q}" for q in minted]}
