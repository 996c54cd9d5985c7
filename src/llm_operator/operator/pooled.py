"""A pool's member as the operator reconciles it: the pool's engine from all its members.

Each member's reconcile reads the other LLMModels of its namespace, renders the pool's
objects from the members that agree (render/pool_engine.py) and applies them; the same
objects come out of every member's reconcile. A member is looked at again every
``RECHECK_SECONDS``, so that one joining, leaving or changing reaches the others' pool, and
its Loaded condition follows what the pool's engine says of it (``member_state``), and
why it could not load it, from the log of the pool's pods (``load_failure``).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from llm_operator.api.pools import pools
from llm_operator.api.v1alpha1 import API_VERSION, LLMModel
from llm_operator.api.validation import InvalidModel, Problem, parse_llmmodel
from llm_operator.kube import ApiError, Kube
from llm_operator.profiles.engines import PORT
from llm_operator.profiles.llama_router import load_error
from llm_operator.profiles.pool import across_pools, plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile.secrets_needed import required_secrets
from llm_operator.reconcile.status import FILE_REJECTED, SOURCE_REJECTED, Blocker
from llm_operator.render.pool_engine import (
    checked_by,
    fetched,
    fetched_for,
    member_cache_name,
    member_check,
    member_problems,
    pool_labels,
    pool_object_name,
    pool_objects,
)
from llm_operator.render.pool_pod import SERVER_CONTAINER

RECHECK_SECONDS = 10.0
STATE_TIMEOUT_SECONDS = 2.0
FILE_REJECTED_REASON = "MemberFileRejected"  # Placed=False: left out of its pool
LOG_TAIL_LINES = "2000"  # a member's start and its errors, with the others' since


async def _namespace_models(kube: Kube, namespace: str) -> list[LLMModel]:
    found = []
    for doc in await kube.list(API_VERSION, "llmmodels", namespace):
        try:
            found.append(parse_llmmodel(doc))
        except InvalidModel:
            continue  # the CRD refused what this would; its own reconcile says why
    return found


async def _pool_pods(kube: Kube, member: LLMModel) -> list[dict[str, Any]]:
    """The pods of the member's pool, listed from the API.

    The operator's pod cache holds models' own pods only.
    """
    assert member.spec.pool is not None
    selector = ",".join(f"{k}={v}" for k, v in pool_labels(member.spec.pool.name).items())
    return await kube.list("v1", "pods", member.namespace, selector)


def rejected_files(pods: list[dict[str, Any]]) -> dict[tuple[str, str | None], str]:
    """The members' files a pool pod refused or could not download, and why ("Reason: text").

    Keyed by ``member_check``: a member's own file path and the sha256 it was checked
    against, so that an edited sha256 is checked anew. Only the reasons no retry changes:
    from a verify container, a wrong checksum, not a GGUF file, no file; from a downloaded
    member's fetch container, no such repo, a refused token, no file of its quantization.
    """
    found: dict[tuple[str, str | None], str] = {}
    for pod in pods:
        statuses = {s.get("name"): s for s in
                    (pod.get("status") or {}).get("initContainerStatuses") or []}
        containers = (pod.get("spec") or {}).get("initContainers") or []
        checks = {c[0]: c for c in map(checked_by, containers) if c}  # by member file
        for container in containers:
            checked, reasons = checked_by(container), FILE_REJECTED
            if checked is None and (path := fetched_for(container)) is not None:
                checked, reasons = checks.get(path, (path, None)), SOURCE_REJECTED
            status = statuses.get(container.get("name")) or {}
            for state in (status.get("state") or {}, status.get("lastState") or {}):
                ended = state.get("terminated") or {}
                message = str(ended.get("message", "")).strip()
                if checked and ended.get("exitCode") not in (None, 0) \
                        and message.partition(": ")[0] in reasons:
                    found[checked] = message[:600]
    return found


def stored_rejection(model: LLMModel) -> str | None:
    """Why the member's file was refused, as its status recorded it for its current spec.

    The pool's pod that said so is gone once the pool rolled without the member.
    """
    status = model.status
    for condition in (status.conditions if status else None) or ():
        if condition.type == "Placed" and condition.reason == FILE_REJECTED_REASON \
                and condition.observed_generation == model.metadata.generation:
            return condition.message
    return None


async def pool_desired(kube: Kube, model: LLMModel, settings: Settings
                       ) -> tuple[list[Blocker], list[dict[str, Any]], list[LLMModel]]:
    """The member's blockers, and the pool's objects and members when it has none.

    A member whose file the pool's pod refused is left out of the pool (its phase Failed,
    saying why, until its spec changes), so that the others start and serve without it:
    from the look of its own reconcile that reads the refusal on the pool's pod, which
    stays until then, and from its status in every other member's.
    """
    pool = model.spec.pool
    assert pool is not None
    problems: list[Problem] = member_problems(model, settings)
    siblings = pools(await _namespace_models(kube, model.namespace)).get(
        (model.namespace, pool.name), [model])
    across = across_pools(siblings, "in the cluster")
    problems += across.get((model.namespace, model.name), [])
    if problems:
        return [Blocker.from_problem(p) for p in problems], [], []
    refused = rejected_files(await _pool_pods(kube, model))

    def rejection(member: LLMModel) -> str | None:
        # a sibling's refusal counts once its own status records it: dropped from the
        # pool on another member's look, it would lose the pod that said so before its
        # own look could read it, and the next look would put it back
        fresh = refused.get(member_check(member)) if member.name == model.name else None
        if fresh is not None:
            return (f"spec.modelSource: the pool's pod could not download or check this "
                    f"member's file ({fresh}): it is left out of pool {pool.name}, whose "
                    "other members serve; fix the file, its source or modelSource.sha256, "
                    "and edit the model to have it fetched and checked again")
        return stored_rejection(member)

    mine = rejection(model)
    if mine is not None:
        return [Blocker(FILE_REJECTED_REASON, mine)], [], []
    # a sibling whose Secret is missing waits with its own blocker, out of the pool: its
    # fetch container would never start, and no member would serve
    members = [m for m in siblings
               if (m.namespace, m.name) not in across and not member_problems(m, settings)
               and rejection(m) is None
               and (m.name == model.name or await _secrets_present(kube, m))]
    objects = pool_objects(members, plan_pool(members), settings)
    # the member's own cache claim, made by its own reconcile, once (its spec is immutable)
    # and before the pod that mounts it; the other members' claims are theirs to make
    wanted = {c["metadata"]["name"] for c in own_claims(model, settings)}
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"
              and o["metadata"]["name"] in wanted]
    if claims and await kube.get("v1", "persistentvolumeclaims", model.namespace,
                                 claims[0]["metadata"]["name"]) is not None:
        claims = []
    rest = [o for o in objects if o["kind"] != "PersistentVolumeClaim"]
    return [], [*claims, *rest], members


def own_claims(model: LLMModel, settings: Settings) -> list[dict[str, Any]]:
    """The children a pooled member keeps of its own: its cache claim if it is downloaded.

    What its prune must leave (it is no pool's but the member's, labelled as its child).
    """
    if not fetched(model.spec, settings):
        return []
    return [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": member_cache_name(model)}}]


async def _secrets_present(kube: Kube, member: LLMModel) -> bool:
    for name, key, _ in required_secrets(member):
        secret = await kube.get("v1", "secrets", member.namespace, name)
        if secret is None or key not in (secret.get("data") or {}):
            return False
    return True


async def member_state(http: aiohttp.ClientSession, cluster_domain: str, model: LLMModel
                       ) -> tuple[str, str | None] | None:
    """What the member's pool's engine says of it: loaded, loading, unloaded or failed.

    With the engine's reason where it gives one with a failure (a vLLM pool's gateway says
    why a wake failed; llama-server's router does not, its log does). None when the
    engine does not answer within ``STATE_TIMEOUT_SECONDS``.
    """
    assert model.spec.pool is not None
    host = f"{pool_object_name(model.spec.pool.name)}.{model.namespace}.svc.{cluster_domain}"
    try:
        async with http.get(f"http://{host}:{PORT}/models",
                            timeout=aiohttp.ClientTimeout(total=STATE_TIMEOUT_SECONDS)) as r:
            body = await r.json() if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    return engine_said(body, model.spec.model_id)


def engine_said(body: Any, model_id: str) -> tuple[str, str | None] | None:
    """The model's state (and reason, with a failure) in a ``GET /models`` answer."""
    for item in (body or {}).get("data") or [] if isinstance(body, dict) else []:
        if isinstance(item, dict) and item.get("id") == model_id:
            status = item.get("status") or {}
            if status.get("failed"):
                reason = status.get("reason")
                return "failed", str(reason) if reason else None
            return str(status.get("value")), None
    return None


async def load_failure(kube: Kube, model: LLMModel) -> str | None:
    """Why the pool's engine could not load the member, in its words, from a pod's log.

    None when no running pod's log says (a log rotated
    past it, or no right to read pods/log: the condition then says to read the log).
    """
    try:
        pods = await _pool_pods(kube, model)
    except (ApiError, aiohttp.ClientError, TimeoutError):
        return None
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        try:
            log = await kube.text(f"/api/v1/namespaces/{model.namespace}/pods/{name}/log",
                                  {"container": SERVER_CONTAINER, "tailLines": LOG_TAIL_LINES})
        except (ApiError, aiohttp.ClientError, TimeoutError):
            continue
        reason = load_error(log, model.spec.model_id)
        if reason is not None:
            return reason
    return None
