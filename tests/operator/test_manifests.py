"""Install manifests: valid, hardened, pointing at the project's image, policy corrected."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from llm_operator.api import labels as L
from llm_operator.api.validation import parse_llmmodel
from llm_operator.cli.main import cli
from llm_operator.gateway.settings.config import parse_config
from llm_operator.gateway.settings.flow_control import FlowControl
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from controlplane import kubectl_path
from k8s_schemas import validate_object
from samples import REPO, sample_doc

CONFIG = REPO / "config"
MANIFESTS = sorted(p for d in ("rbac", "manager", "default", "security", "mcp", "redis", "priority",
                                "router", "router/monitoring")
                   for p in (CONFIG / d).glob("*.yaml")
                   if p.name not in {"kustomization.yaml", "settings.yaml"})


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_validates(path: Path) -> None:
    assert [e for d in docs(path) for e in validate_object(d)] == []


@pytest.mark.parametrize("kustomization", sorted(CONFIG.rglob("kustomization.yaml")),
                         ids=lambda p: p.parent.name)
def test_kustomizations_reference_real_files(kustomization: Path) -> None:
    spec = yaml.safe_load(kustomization.read_text())
    files = list(spec.get("resources", []))
    files += [f for g in spec.get("configMapGenerator", []) for f in g.get("files", [])]
    missing = [f for f in files if not (kustomization.parent / f).exists()]
    assert missing == []


@pytest.mark.parametrize(("path", "command"), [
    (CONFIG / "manager" / "manager.yaml", "operator"),
    (CONFIG / "mcp" / "deployment.yaml", "mcp"),
    (CONFIG / "router" / "deployment.yaml", "router"),
], ids=["operator", "mcp", "router"])
def test_deployments_are_hardened_and_run_the_project_image(path: Path, command: str) -> None:
    deploy = docs(path)[0]
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == Settings().images.operator
    assert container["args"][0] == command
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    sec = container["securityContext"]
    assert sec["readOnlyRootFilesystem"] is True and sec["capabilities"]["drop"] == ["ALL"]
    assert sec["allowPrivilegeEscalation"] is False
    assert {"livenessProbe", "readinessProbe", "resources"} <= set(container)
    # Ready within a second of answering, not at the next readiness period (10 s): the
    # kubelet probes readiness at once when the startup probe on the same path passes
    assert container["startupProbe"]["httpGet"] == container["readinessProbe"]["httpGet"]
    assert container["startupProbe"]["periodSeconds"] == 1
    # The arguments are ones the subcommand accepts (click raises on anything else).
    args = list(container["args"])
    subcommand = cli.get_command(click.Context(cli), args[0])
    assert subcommand is not None
    subcommand.make_context(args[0], args[1:])


def test_the_router_keys_overlay_mounts_the_secret_its_keys_file_names() -> None:
    """`kubectl apply -k config/router-keys`: the router's Deployment, with client keys."""
    built = subprocess.run([kubectl_path(), "kustomize", str(CONFIG / "router-keys")],
                           check=True, capture_output=True, text=True).stdout
    objects = [d for d in yaml.safe_load_all(built) if d]
    assert [e for d in objects for e in validate_object(d)] == []
    deploy = next(d for d in objects if d["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    router = cli.get_command(click.Context(cli), "router")
    assert router is not None
    keys_file = router.make_context("router", args[1:]).params["keys_file"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "keys")
    assert Path(keys_file).parent == Path(mount["mountPath"]) and mount["readOnly"]
    assert {"name": "keys", "secret": {"secretName": "llmop-router-keys"}} in pod["volumes"]
    assert len(objects) == len([d for p in (CONFIG / "router").glob("*.yaml")
                                if p.name != "kustomization.yaml" for d in docs(p)])


def test_the_router_admin_overlay_mounts_the_token_and_may_write_only_the_keys_secret(
        ) -> None:
    """`kubectl apply -k config/router-admin`: the console's administrator writes keys to
    the Secret the keys file is mounted from, and to no other."""
    built = subprocess.run([kubectl_path(), "kustomize", str(CONFIG / "router-admin")],
                           check=True, capture_output=True, text=True).stdout
    objects = [d for d in yaml.safe_load_all(built) if d]
    assert [e for d in objects for e in validate_object(d)] == []
    pod = next(d for d in objects if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    router = cli.get_command(click.Context(cli), "router")
    assert router is not None
    params = router.make_context("router", pod["containers"][0]["args"][1:]).params
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert Path(params["admin_token_file"]).parent == Path(mounts["admin"]["mountPath"])
    assert Path(params["keys_file"]).parent == Path(mounts["keys"]["mountPath"])
    assert volumes["admin"] == "llmop-router-admin"
    namespace, secret = params["keys_secret"].split("/")
    assert volumes["keys"] == secret and namespace == "llm-operator-system"
    role = next(d for d in objects if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == namespace
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [secret], "verbs": ["get", "patch"]}]
    binding = next(d for d in objects if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_the_router_oidc_overlay_takes_the_issuer_from_its_configmap_and_the_secret_mounted(
        ) -> None:
    """`kubectl apply -k config/router-oidc`: the args the kubelet expands (from the
    llmop-router-oidc ConfigMap) are ones `llmop router` takes, and the client secret
    is read from the mounted Secret; the admin token stays."""
    built = subprocess.run([kubectl_path(), "kustomize", str(CONFIG / "router-oidc")],
                           check=True, capture_output=True, text=True).stdout
    objects = [d for d in yaml.safe_load_all(built) if d]
    assert [e for d in objects for e in validate_object(d)] == []
    pod = next(d for d in objects if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    values = {"issuer": "https://dex.example.com", "client-id": "llmop-console",
              "redirect-url": "https://llm.example.com/ui/oidc/callback",
              "allow": "group:ml-team", "admin": "group:llm-admins"}
    env = {e["name"]: values[e["valueFrom"]["configMapKeyRef"]["key"]]
           for e in container["env"]
           if e["valueFrom"]["configMapKeyRef"]["name"] == "llmop-router-oidc"}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
    router = cli.get_command(click.Context(cli), "router")
    assert router is not None
    params = router.make_context("router", args[1:]).params
    assert (params["oidc_issuer"], params["oidc_client_id"], params["oidc_redirect_url"],
            params["oidc_allowed"], params["oidc_admins"]) == (
        "https://dex.example.com", "llmop-console", "https://llm.example.com/ui/oidc/callback",
        ("group:ml-team",), ("group:llm-admins",))
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for secret_file in ("oidc_client_secret_file", "oidc_session_key_file"):
        assert Path(params[secret_file]).parent == Path(mounts["oidc"]["mountPath"])
    assert volumes["oidc"] == "llmop-router-oidc" and mounts["oidc"]["readOnly"]
    assert params["admin_token_file"] and params["keys_secret"]


def test_the_router_batch_overlay_elects_a_runner_and_reaches_redis_with_its_password(
        ) -> None:
    """`kubectl apply -k config/router-batch`: the Batch API, Redis, the Lease's RBAC."""
    built = subprocess.run([kubectl_path(), "kustomize", str(CONFIG / "router-batch")],
                           check=True, capture_output=True, text=True).stdout
    objects = [d for d in yaml.safe_load_all(built) if d]
    assert [e for d in objects for e in validate_object(d)] == []
    pod = next(d for d in objects if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    router = cli.get_command(click.Context(cli), "router")
    assert router is not None
    params = router.make_context("router", args[1:]).params
    lease_ns, lease_name = params["batch_lease"].split("/")
    role = next(d for d in objects if d["kind"] == "Role")
    assert (role["metadata"]["namespace"], role["rules"][0]["resources"]) == \
        (lease_ns, ["leases"])
    assert {"get", "create", "update"} <= set(role["rules"][0]["verbs"])
    binding = next(d for d in objects if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"]
                 if m["name"] == "redis-password")
    assert Path(params["redis_password_file"]).parent == Path(mount["mountPath"])
    redis_service = docs(CONFIG / "redis" / "service.yaml")[0]["metadata"]
    assert f"{redis_service['name']}.{redis_service['namespace']}.svc" in params["redis_url"]
    access = next(d for d in objects if d["kind"] == "NetworkPolicy"
                  and d["metadata"]["namespace"] == redis_service["namespace"])
    assert access["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == \
        {"app": "llmop-router"}
    assert lease_name and params["redis_url"].startswith("redis://")


def test_the_router_reads_the_flow_control_settings_its_config_map_holds() -> None:
    """config/router/settings.yaml: the defaults written out, mounted where --settings says."""
    config_map = docs(CONFIG / "router" / "settings.yaml")[0]
    settings = yaml.safe_load(config_map["data"]["settings.yaml"])
    parsed = parse_config({"routes": [], **settings}, "settings.yaml", empty_ok=True)
    assert parsed.flow_control == FlowControl()  # the file shows what the defaults are
    pod = docs(CONFIG / "router" / "deployment.yaml")[0]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    router = cli.get_command(click.Context(cli), "router")
    assert router is not None
    settings_file = router.make_context("router", args[1:]).params["settings_file"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "settings")
    assert Path(settings_file).parent == Path(mount["mountPath"])
    assert {"name": "settings", "configMap": {"name": config_map["metadata"]["name"]}} \
        in pod["volumes"]


def test_mcp_server_runs_two_replicas_reachable_only_inside_the_cluster() -> None:
    deploy = docs(CONFIG / "mcp" / "deployment.yaml")[0]
    service = docs(CONFIG / "mcp" / "service.yaml")[0]
    assert deploy["spec"]["replicas"] == 2
    assert service["spec"]["type"] == "ClusterIP"
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    inference = docs(CONFIG / "security" / "network-policy.yaml")[0]
    admitted = [f["podSelector"]["matchLabels"] for rule in inference["spec"]["ingress"]
                for f in rule["from"] if "podSelector" in f]
    assert any(sel.items() <= labels.items() for sel in admitted)  # it may call the models


def test_mcp_role_only_reads_llmmodels() -> None:
    role = next(d for d in docs(CONFIG / "mcp" / "rbac.yaml") if d["kind"] == "Role")
    assert role["rules"] == [{"apiGroups": ["ai.example.io"], "resources": ["llmmodels"],
                              "verbs": ["get", "list", "watch"]}]


REDIS_IMAGE = "docker.io/library/redis:7.4.2-alpine"  # config/redis: the official image


def test_every_image_in_config_is_the_project_image_or_redis() -> None:
    images = {(p.parent.name, line.split("image:", 1)[1].strip()) for p in CONFIG.rglob("*.yaml")
              for line in p.read_text().splitlines() if line.strip().startswith("image:")}
    assert {image for d, image in images if d != "redis"} == {Settings().images.operator}
    assert {image for d, image in images if d == "redis"} == {REDIS_IMAGE}


def test_config_redis_serves_the_gateways_the_operator_renders() -> None:
    """The URL its kustomization tells you to set reaches its Service; its policy admits the
    rendered gateway pods, and their policy lets them out to it."""
    kustomization = (CONFIG / "redis" / "kustomization.yaml").read_text()
    url = next(line.split("redisUrl:", 1)[1].strip() for line in kustomization.splitlines()
               if "redisUrl:" in line)
    service = docs(CONFIG / "redis" / "service.yaml")[0]
    meta, port = service["metadata"], service["spec"]["ports"][0]["port"]
    assert url == f"redis://{meta['name']}.{meta['namespace']}.svc:{port}/0"
    redis = docs(CONFIG / "redis" / "statefulset.yaml")[0]
    assert redis["spec"]["template"]["metadata"]["labels"].items() >= \
        service["spec"]["selector"].items()
    secret = redis["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]
    settings = Settings.model_validate({"gateway": {
        "redisUrl": url, "redisPasswordSecret": secret["secretKeyRef"]["name"]}})
    model = sample_doc("gpt55-remote")
    model["metadata"]["namespace"] = meta["namespace"]
    objects = render(parse_llmmodel(model), settings)
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]
    policy = docs(CONFIG / "redis" / "network-policy.yaml")[0]
    admitted = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert admitted.items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": port}]
    egress = next(o for o in objects if o["kind"] == "NetworkPolicy")["spec"]["egress"]
    assert {"protocol": "TCP", "port": port} in egress[1]["ports"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["redis"]["secret"]["secretName"] == "llmop-redis"


def test_settings_file_is_valid() -> None:
    Settings.model_validate(yaml.safe_load((CONFIG / "manager" / "settings.yaml").read_text()))


def test_network_policy_selects_every_model_pod() -> None:
    policy = docs(CONFIG / "security" / "network-policy.yaml")[0]
    assert policy["spec"]["podSelector"] == {"matchExpressions": [
        {"key": L.MODEL_NAME, "operator": "Exists"}]}
    clients = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert clients == {L.LLM_CLIENT: "true"}
