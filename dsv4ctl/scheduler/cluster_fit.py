"""Which resource a cluster cannot give a spec's job: the partition's nodes (CPUs, memory, GRES), its time limit and
node count, read once with `sinfo`, set against what the rendered script asks for.

sbatch --test-only answers "Requested node configuration is not available" whatever was too big; this names it
("cpus_per_task 64: the nodes of partition dcu have 2 CPUs"), so the fix is one edit away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a leaf: the scheduler imports it, so it must not import the spec back
    from ..spec.models import SlurmSpec

# sinfo's fields, one line per group of like nodes: partition (default marked *), CPUs, memory (MB), GRES,
# time limit, node count, availability.
SINFO_FORMAT = "%P|%c|%m|%G|%l|%D|%a"


@dataclass(frozen=True)
class NodeGroup:
    partition: str
    default: bool
    cpus: int
    memory_mb: int
    gres: dict[str, int]  # "dcu" -> 8 (type-qualified "gpu:a100:4" counts for both "gpu:a100" and "gpu")
    time_limit_min: int | None  # None: infinite
    nodes: int


@dataclass(frozen=True)
class Refusal:
    resource: str  # partition | cpus | memory | gres | time | nodes
    asked: str
    available: str
    message: str

    def to_json(self) -> dict:
        return {"resource": self.resource, "asked": self.asked, "available": self.available,
                "message": self.message}


def parse_sinfo(text: str) -> list[NodeGroup]:
    """sinfo --noheader -o SINFO_FORMAT; lines that do not parse are skipped (a partial answer names less)."""
    groups = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7 or not fields[1].isdigit():
            continue
        name, cpus, memory, gres, limit, nodes, _avail = fields
        groups.append(NodeGroup(partition=name.rstrip("*"), default=name.endswith("*"), cpus=int(cpus),
                                memory_mb=int(re.sub(r"\D.*", "", memory) or 0), gres=parse_gres(gres),
                                time_limit_min=slurm_minutes(limit), nodes=int(nodes) if nodes.isdigit() else 0))
    return groups


def parse_gres(text: str) -> dict[str, int]:
    """`dcu:8`, `gpu:a100:4(S:0-1),gpu:v100:2` -> {"dcu": 8} / {"gpu:a100": 4, "gpu": 6, "gpu:v100": 2}."""
    counts: dict[str, int] = {}
    for item in text.split(","):
        item = re.sub(r"\(.*?\)", "", item).strip()
        match = re.fullmatch(r"([A-Za-z0-9_]+)(?::([A-Za-z0-9_.-]+))?:(\d+)", item)
        if not match:
            continue
        name, kind, count = match.group(1), match.group(2), int(match.group(3))
        counts[name] = counts.get(name, 0) + count
        if kind:
            counts[f"{name}:{kind}"] = counts.get(f"{name}:{kind}", 0) + count
    return counts


def slurm_minutes(text: str) -> int | None:
    """A Slurm time (`infinite`, `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in whole minutes,
    rounded up; None for infinite or unreadable."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        return None
    days, a, b, c = (int(x) if x else None for x in match.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        seconds = a * 60 + b
    else:  # MM
        seconds = a * 60
    return -(-seconds // 60)


def refusals(slurm: "SlurmSpec", groups: list[NodeGroup]) -> list[Refusal]:
    """What the spec asks for that no node group of its partition has; empty when every asked resource fits
    somewhere (then the refusal was something else: account, QOS, a reservation — sbatch's words say which)."""
    if not groups:
        return []
    partition = slurm.partition or next((g.partition for g in groups if g.default), None)
    mine = [g for g in groups if g.partition == partition]
    if not mine:
        known = sorted({g.partition for g in groups})
        return [Refusal("partition", str(partition), ", ".join(known),
                        f"partition {partition!r} does not exist (partitions: {', '.join(known)})")]
    found: list[Refusal] = []
    cpus = max(g.cpus for g in mine)
    if slurm.cpus_per_task and slurm.cpus_per_task > cpus:
        found.append(Refusal("cpus", str(slurm.cpus_per_task), str(cpus),
                             f"cpus_per_task {slurm.cpus_per_task}: the nodes of partition {partition} have at "
                             f"most {cpus} CPUs"))
    if slurm.gres:
        name, count = slurm.gres.rsplit(":", 1)
        most = max(g.gres.get(name, 0) for g in mine)
        if int(count) > most:
            found.append(Refusal("gres", slurm.gres, f"{name}:{most}",
                                 f"gres {slurm.gres}: the nodes of partition {partition} have "
                                 f"{f'{name}:{most}' if most else f'no {name}'}"))
    if slurm.mem:
        asked_mb = _megabytes(slurm.mem)
        memory = max(g.memory_mb for g in mine)
        if asked_mb is not None and memory and asked_mb > memory:
            found.append(Refusal("memory", slurm.mem, f"{memory}M",
                                 f"mem {slurm.mem}: the nodes of partition {partition} have at most {memory} MB"))
    limits = [g.time_limit_min for g in mine]
    asked_min = slurm_minutes(slurm.time) if slurm.time else None
    if asked_min is not None and None not in limits and asked_min > max(limits):  # type: ignore[type-var]
        found.append(Refusal("time", str(slurm.time), f"{max(limits)} min",  # type: ignore[type-var]
                             f"time {slurm.time}: partition {partition}'s limit is {max(limits)} minutes"))
    nodes = sum(g.nodes for g in mine)
    if slurm.nodes > nodes:
        found.append(Refusal("nodes", str(slurm.nodes), str(nodes),
                             f"nodes {slurm.nodes}: partition {partition} has {nodes}"))
    return found


def _megabytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMGT])?B?", text.upper())
    if not match:
        return None
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, None: 1}[match.group(2)]
    return int(int(match.group(1)) * scale)
