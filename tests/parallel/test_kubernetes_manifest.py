"""docs/scaling-out.md's Kubernetes manifest, without a cluster: its parts agree (an Indexed Job of as many
pods as torchrun's --nnodes, pods named under the headless Service, pod 0 as the master), and each pod's
command trains its rank of one job when run as Kubernetes would run it: the kubelet expands ``$(VAR)`` from
the container's environment (the Job controller puts ``JOB_COMPLETION_INDEX`` there), and the Service's DNS
makes ``digits-ddp-0.digits-ddp`` pod 0's address (here: 127.0.0.1)."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from tests.test_docs_pages import code_blocks


def _manifest() -> tuple[dict, dict]:
    """(the Service, the Job) of the page's one YAML block."""
    (block,) = code_blocks("scaling-out.md")["yaml"]
    documents = {document["kind"]: document for document in yaml.safe_load_all(block)}
    assert set(documents) == {"Service", "Job"}, documents.keys()
    return documents["Service"], documents["Job"]


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_the_indexed_job_has_a_pod_per_node_named_under_the_headless_service_with_pod_0_as_master():
    service, job = _manifest()
    name, spec = job["metadata"]["name"], job["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    command = container["command"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(_option(command, "--nnodes"))
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"job-name": name}
    assert spec["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert _option(command, "--master-addr") == f"{name}-0.{service['metadata']['name']}"  # pod 0's DNS name
    assert _option(command, "--node-rank") == "$(JOB_COMPLETION_INDEX)"
    assert [port["port"] for port in service["spec"]["ports"]] == [int(_option(command, "--master-port"))]
    gpus = container["resources"]["limits"]["nvidia.com/gpu"]
    assert int(_option(command, "--nproc-per-node")) == gpus, "a process per GPU the pod asks for"


def _as_the_pod_runs_it(command: list[str], index: int, port: int) -> list[str]:
    """Pod `index`'s command on this machine: ``$(VAR)`` expanded from its environment as the kubelet does,
    pod 0's DNS name as this machine's address, one CPU process in the place of the pod's 4 GPUs."""
    environment = {"JOB_COMPLETION_INDEX": str(index)}
    words = [re.sub(r"\$\((\w+)\)", lambda m: environment[m.group(1)], word) for word in command]
    words[words.index("--master-addr") + 1] = "127.0.0.1"
    words[words.index("--master-port") + 1] = str(port)
    words[words.index("--nproc-per-node") + 1] = "1"
    assert words[0] == "torchrun"
    return [sys.executable, "-m", "torch.distributed.run", *words[1:]]


def test_each_pods_command_trains_its_rank_of_one_job(tmp_path, free_port):
    _, job = _manifest()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    port = free_port()
    commands = [_as_the_pod_runs_it(container["command"], i, port) for i in range(job["spec"]["completions"])]
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    pods = [subprocess.Popen(command, cwd=tmp_path, **output) for command in commands]
    try:
        outputs = [pod.communicate(timeout=300)[0] for pod in pods]
    finally:
        for pod in pods:
            pod.kill()
    assert [pod.returncode for pod in pods] == [0, 0], "\n---\n".join(output[-2000:] for output in outputs)
    finished = [line for line in outputs[0].splitlines() if line.startswith("finished: ")]
    assert finished and "on 2 processes" in finished[0], outputs[0][-2000:]
    assert "finished: " not in outputs[1]  # rank 1 trained silently: one job, not two
