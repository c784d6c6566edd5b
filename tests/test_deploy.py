"""deploy/: the KubeRay manifests against KubeRay's published RayCluster CRD schema.

The schema (deploy/schemas/ray.io_rayclusters.v1.json, see its README) is validated
with ``jsonschema`` with unknown fields rejected, as the API server's strict field
validation (kubectl's default) does; a misspelt field therefore fails, which the
negative checks below show. Beyond the schema: every worker group's custom resources
are read by the runtime's own node parser (``nodes_from_ray``), the controller's
command by ``goodput-jax``'s own argument parser, and its address names the
RayCluster's head service.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from goodput_jax.cli import build_parser
from goodput_jax.cluster.plan import nodes_from_ray

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DEVICE_LIMITS = ("google.com/tpu", "nvidia.com/gpu")


def strict(schema):
    """The schema with ``additionalProperties: false`` on every object that lists its
    properties and does not preserve unknown fields (Kubernetes' strict validation)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def schema():
    return strict(json.loads((DEPLOY / "schemas" / "ray.io_rayclusters.v1.json").read_text()))


@pytest.fixture(scope="module")
def raycluster():
    docs = list(yaml.safe_load_all((DEPLOY / "kuberay" / "raycluster.yaml").read_text()))
    assert len(docs) == 1
    return docs[0]


@pytest.fixture(scope="module")
def controller():
    docs = list(yaml.safe_load_all((DEPLOY / "kuberay" / "controller.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def errors(doc, schema) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(doc))


def group_resources(group) -> dict:
    """A worker group's ``rayStartParams.resources`` as Ray reads it: the shell unquotes
    KubeRay's ``--resources=...`` argument, the kubelet expands ``$(POD_NAME)``."""
    words = shlex.split(group["rayStartParams"]["resources"])
    assert len(words) == 1, words
    env = {e["name"] for e in group["template"]["spec"]["containers"][0].get("env", ())}
    for var in re.findall(r"\$\((\w+)\)", words[0]):
        assert var in env, f"{group['groupName']}: $({var}) is not in the ray container's env"
    return json.loads(words[0].replace("$(POD_NAME)", f"goodput-{group['groupName']}-x7k2p"))


def runtime_node(group):
    """The runtime's NodeRecord of one pod of ``group`` (Ray's node table entry)."""
    res = {"CPU": 1.0, **{k: float(v) for k, v in group_resources(group).items()}}
    nodes = nodes_from_ray([{"Alive": True, "NodeID": "ab", "NodeManagerAddress": "10.0.0.2",
                             "Resources": res}])
    assert len(nodes) == 1, f"{group['groupName']}: not a runtime node: {sorted(res)}"
    return nodes[0]


def test_raycluster_matches_kuberay_crd_schema(raycluster, schema):
    assert (raycluster["apiVersion"], raycluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert set(raycluster["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert errors(raycluster, schema) == []


@pytest.mark.parametrize("path, value, expect", [
    (("workerGroupSpecs", 0, "replica"), 2, "'replica' was unexpected"),
    (("workerGroupSpecs", 0, "rayStartParams", "num-cpus"), 0, "0 is not of type 'string'"),
    (("workerGroupSpecs", 1, "template", "spec", "containers", 0, "resource"), {},
     "'resource' was unexpected"),
    (("headGroupSpec", "rayStartParam"), {}, "'rayStartParam' was unexpected"),
])
def test_a_wrong_field_fails_the_schema(raycluster, schema, path, value, expect):
    bad = copy.deepcopy(raycluster)
    node = bad["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    found = errors(bad, schema)
    assert any(expect in e for e in found), found
    missing = copy.deepcopy(raycluster)
    del missing["spec"]["workerGroupSpecs"][0]["groupName"]
    assert any("'groupName' is a required property" in e for e in errors(missing, schema))


def test_worker_groups_carry_the_runtime_resources(raycluster):
    groups = raycluster["spec"]["workerGroupSpecs"]
    seen = {}
    for group in groups:
        node = runtime_node(group)
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        devices = [int(limits[k]) for k in DEVICE_LIMITS if k in limits]
        assert devices == [node.devices], (group["groupName"], limits)  # one gj_accel per device
        assert node.label == f"{node.accelerator_type}-goodput-{group['groupName']}-x7k2p"
        spot = group["template"]["spec"].get("nodeSelector", {}).get("cloud.google.com/gke-spot")
        assert node.preemptible == (spot == "true"), group["groupName"]
        seen.setdefault(node.accelerator_type, []).append(group["groupName"])
    assert seen == {"v5e": ["v5e", "v5e-spot"], "a100": ["a100"]}
    # Ray's autoscaler sizes each group within its bounds
    assert raycluster["spec"]["enableInTreeAutoscaling"] is True
    for group in groups:
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group
    # the head runs no job: no runtime resources, no CPUs for job processes
    head = raycluster["spec"]["headGroupSpec"]["rayStartParams"]
    assert "resources" not in head and head["num-cpus"] == "0"
    # a group whose resources lack the type is refused by the runtime's parser
    bad = copy.deepcopy(groups[0])
    bad["rayStartParams"]["resources"] = '"{\\"gj_accel\\": 4, \\"gj_node_$(POD_NAME)\\": 1}"'
    with pytest.raises(ValueError, match="exactly one gj_type_"):
        runtime_node(bad)
    bad["template"]["spec"]["containers"][0]["env"] = []
    with pytest.raises(AssertionError, match=r"\$\(POD_NAME\) is not in the ray container"):
        group_resources(bad)


def test_controller_deployment(controller, raycluster, schema):
    deploy, pvc = controller["Deployment"], controller["PersistentVolumeClaim"]
    assert deploy["apiVersion"] == "apps/v1" and pvc["apiVersion"] == "v1"
    spec = deploy["spec"]
    assert set(spec) == {"replicas", "strategy", "selector", "template"}
    # one controller, never two at once
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    # its pod template against the PodTemplateSpec schema inside KubeRay's CRD
    pod_schema = schema["properties"]["spec"]["properties"]["headGroupSpec"]["properties"][
        "template"]
    assert errors(spec["template"], pod_schema) == []
    typo = copy.deepcopy(spec["template"])
    typo["spec"]["containers"][0]["arg"] = []
    assert any("'arg' was unexpected" in e for e in errors(typo, pod_schema))
    # its command, as goodput-jax parses it
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["goodput-jax"]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.cluster_command) == ("cluster", "up")
    assert args.address == f"ray://{raycluster['metadata']['name']}-head-svc:10001"
    # the state directory is on the shared volume, mounted at one path everywhere
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claim = pvc["metadata"]["name"]
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]
    pods = [spec["template"], raycluster["spec"]["headGroupSpec"]["template"]] + [
        g["template"] for g in raycluster["spec"]["workerGroupSpecs"]]
    for pod in pods:
        vols = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]}
        where = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert vols == {"goodput-state": claim} and where == mounts
    assert args.state_dir.startswith(mounts["goodput-state"] + "/")


def test_image_ray_version_matches_the_cluster(raycluster):
    base = re.search(r"^ARG BASE=rayproject/ray:(\S+?)-py(\d+)", (DEPLOY / "Dockerfile").read_text(),
                     re.M)
    assert base and base.group(1) == raycluster["spec"]["rayVersion"]
    assert base.group(2) == "311"
