"""Which resource the cluster cannot give: sinfo's node groups set against a spec's #SBATCH asks, on recorded
sinfo text (this cluster's, a GPU cluster with typed GRES and several node groups) and on the live cluster."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.scheduler.cluster_fit import parse_gres, parse_sinfo, refusals, slurm_minutes
from dsv4ctl.spec.models import SlurmSpec

from .conftest import EXPERIMENTS
from .test_slurm import cluster  # noqa: F401  (the live-cluster fixture)

# `sinfo --noheader -o "%P|%c|%m|%G|%l|%D|%a"` on this test cluster, and on a GPU site with two node types.
THIS_CLUSTER = "dcu*|2|23081|dcu:8|infinite|1|up\ndebug|2|23081|dcu:8|infinite|1|up\n"
GPU_SITE = ("gpu*|64|515000|gpu:a100:8(S:0-1)|2-00:00:00|12|up\n"
            "gpu*|128|1030000|gpu:h100:4(S:0-3),shard:16|2-00:00:00|4|up\n"
            "short|32|256000|(null)|30:00|40|up\n")


def test_sinfo_lines_become_node_groups():
    groups = parse_sinfo(GPU_SITE)
    assert [g.partition for g in groups] == ["gpu", "gpu", "short"] and groups[0].default
    assert groups[0].gres == {"gpu": 8, "gpu:a100": 8} and groups[1].gres["gpu:h100"] == 4
    assert groups[2].gres == {} and groups[2].time_limit_min == 30 and groups[0].time_limit_min == 2880
    assert parse_sinfo("garbage\n|||\n") == []


def test_slurm_times_in_minutes():
    assert [slurm_minutes(t) for t in ("infinite", "30", "30:01", "01:00:00", "1-0", "1-02:03:04")] == \
        [None, 30, 31, 60, 1440, 1564]
    assert parse_gres("dcu:8") == {"dcu": 8}


def test_the_j17_spec_on_this_cluster_names_cpus_and_memory():
    slurm = SlurmSpec(partition="dcu", gres="dcu:8", cpus_per_task=64, mem="240gb", time="02:00:00")
    found = refusals(slurm, parse_sinfo(THIS_CLUSTER))
    assert [r.resource for r in found] == ["cpus", "memory"]
    assert found[0].message == "cpus_per_task 64: the nodes of partition dcu have at most 2 CPUs"


def test_gres_time_nodes_and_partition_are_named():
    groups = parse_sinfo(GPU_SITE)
    assert [r.resource for r in refusals(SlurmSpec(gres="gpu:16"), groups)] == ["gres"]
    assert refusals(SlurmSpec(gres="dcu:8"), groups)[0].message == "gres dcu:8: the nodes of partition gpu have no dcu"
    assert [r.resource for r in refusals(SlurmSpec(partition="short", time="01:00:00", nodes=41), groups)] == \
        ["time", "nodes"]
    missing = refusals(SlurmSpec(partition="dcu"), groups)
    assert missing[0].resource == "partition" and "gpu, short" in missing[0].message
    # what fits names nothing (a refusal for another reason keeps sbatch's words alone)
    assert refusals(SlurmSpec(gres="gpu:a100:8", cpus_per_task=64, time="1-00:00:00"), groups) == []
    assert refusals(SlurmSpec(cpus_per_task=4), []) == []


@pytest.mark.slurm
def test_validate_cluster_gives_one_verdict_naming_the_resource(cli, cluster):  # noqa: F811
    text = cli("validate", "--cluster", EXPERIMENTS / "j17-baseline.yaml")
    assert text.exit_code == 1
    lines = [line for line in text.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "j17-baseline.yaml: REFUSED by the cluster: cpus_per_task 64" in lines[0]
    assert " ok " not in lines[0]
    entry = json.loads(cli("validate", "--cluster", "--json", EXPERIMENTS / "j17-baseline.yaml").stdout)[0]
    assert entry["valid"] is False and entry["cluster"]["refused"][0] == \
        {"resource": "cpus", "asked": "64", "available": "2",
         "message": "cpus_per_task 64: the nodes of partition dcu have at most 2 CPUs"}
