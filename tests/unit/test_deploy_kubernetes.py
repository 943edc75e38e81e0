"""deploy/kubernetes validates against the Kubernetes schemas, and says what it promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rogue_watchdog.config import parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
READ_VERBS = {"get", "list", "watch"}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def _kind(kind: str) -> dict[str, Any]:
    return next(doc for _, doc in _docs() if doc["kind"] == kind)


@pytest.mark.parametrize("version", ["1.29.0", "1.37.0"])
def test_every_manifest_validates_strictly(version: str) -> None:
    docs = _docs()
    assert {d["kind"] for _, d in docs} == {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
        "DaemonSet",
    }  # fmt: skip
    for name, doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises when invalid
        assert doc["metadata"]["name"].startswith("rogue-watchdog"), name


def test_daemonset_shape() -> None:
    ds = _kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["serviceAccountName"] == _kind("ServiceAccount")["metadata"]["name"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    [c] = pod["containers"]
    assert set(c["resources"]["limits"]) == {"cpu", "memory"}
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    notes = ds["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert notes["prometheus.io/port"] == str(port)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert "KILL" not in c["securityContext"]["capabilities"]["add"]
    # Every host mount but the state and run directories is read-only.
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert host["host-proc"] == "/proc"
    for name in host:
        assert mounts[name].get("readOnly", False) is (name not in {"state", "run"}), name
    # The root file system is read-only: the status socket and the files a restart keeps
    # (sanctioned.json, outage.json) need the node's /run/rogue-watchdog, writable.
    cfg = parse_config(_kind("ConfigMap")["data"]["config.yaml"], "configmap.yaml")
    socket_dir = str(Path(cfg.daemon.socket).parent)
    assert host["run"] == mounts["run"]["mountPath"] == socket_dir == "/run/rogue-watchdog"


def test_rbac_is_read_only() -> None:
    rules = _kind("ClusterRole")["rules"]
    assert all(set(r["verbs"]) <= READ_VERBS for r in rules)
    granted = {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    assert granted == {
        ("", "pods"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }


def test_configmap_config_is_valid_and_matches_the_mounts() -> None:
    text = _kind("ConfigMap")["data"]["config.yaml"]
    cfg = parse_config(text, "configmap.yaml")
    [c] = _kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    mounted = {m["mountPath"] for m in c["volumeMounts"]}
    assert cfg.paths.proc_root in mounted
    assert cfg.paths.cron_d in mounted and cfg.paths.crontab in mounted
    assert set(cfg.paths.unit_dirs) <= mounted
    assert cfg.daemon.state_dir in mounted
    assert cfg.daemon.metrics_listen == "0.0.0.0:9101"


def test_containerfile_runs_the_daemon() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    assert 'ENTRYPOINT ["rogue-watchdog"]' in text
    assert 'CMD ["run", "--config", "/etc/rogue-watchdog/config.yaml"]' in text


def test_the_validator_rejects_a_misspelled_field() -> None:
    ds = _kind("DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, "1.37.0", strict=True)
