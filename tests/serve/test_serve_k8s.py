"""The Kubernetes deployment of avatar-app serve (packaging/k8s): what it must say, checked without a cluster."""
from __future__ import annotations

from pathlib import Path

import yaml

K8S = Path(__file__).resolve().parents[2] / "packaging" / "k8s"


def _docs() -> dict[str, dict]:
    out = {}
    for f in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            out[doc["kind"]] = doc
    return out


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_deployment_probes_triton_and_ports_match_the_serve_arguments():
    docs = _docs()
    dep = docs["Deployment"]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    args = c["args"]
    for name, flag in (("grpc", "--grpc-port"), ("http", "--http-port"), ("metrics", "--metrics-port")):
        assert str(ports[name]) == args[args.index(flag) + 1]
    # Triton's own health endpoints on its HTTP port, and its Prometheus endpoint
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(ports["metrics"]) and ann["prometheus.io/path"] == "/metrics"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/cache", "/tmp", "/dev/shm"} <= mounts
    assert {"name": "AVATAR_APP_CACHE_DIR", "value": "/cache"} in c["env"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # Triton gets its exit timeout (5 s) and the engines time to close before SIGKILL
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 15


def test_service_stays_inside_the_cluster_and_the_network_policy_limits_callers():
    docs = _docs()
    svc, pol = docs["Service"], docs["NetworkPolicy"]
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["type"] == "ClusterIP"  # no authentication: never a LoadBalancer by default
    assert svc["spec"]["selector"].items() <= labels.items()
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    allowed = [rule["from"] for rule in pol["spec"]["ingress"]]
    assert all(sel for sel in allowed)  # no rule open to everyone


def test_the_image_runs_serve_on_every_interface_as_a_user():
    text = (K8S / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["avatar-app", "serve", "--host", "0.0.0.0"]' in text
    assert "[serve]" in text and "USER 1000" in text and "EXPOSE 8000 8001 8002" in text
