"""The tool DAGs the end-to-end benchmark runs, with seeded tool latencies.

A workload is a list of calls in the order a model would write them (a topological
order), each with the tool it calls, the calls it depends on, and how long its tool takes.
The shapes follow LLMCompiler's benchmarks (a two-hop question, an eight-way comparison,
a fan-out/fan-in) plus a chain, a wide-then-narrow plan and random DAGs.

Latencies are in model seconds (what a hosted model and web tools take); the runner
scales them to milliseconds for the real clock. They are heavy-tailed: a log-normal body
around `median` (most calls fast, a little spread), and with probability `straggler_p` a
call is a straggler taking `straggler_x` times as long.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

__all__ = [
    "SHAPES",
    "LatencyModel",
    "Node",
    "Workload",
    "all_workloads",
    "chain",
    "eight_way",
    "fan_out_fan_in",
    "make",
    "random_dag",
    "two_hop",
    "wide_then_narrow",
]


@dataclass(frozen=True)
class LatencyModel:
    """Tool latency in seconds: log-normal body, a few stragglers `straggler_x` times slower."""

    median: float = 1.0
    sigma: float = 0.3
    straggler_p: float = 0.1
    straggler_x: float = 3.0

    def draw(self, rng: random.Random) -> float:
        body = self.median * math.exp(rng.gauss(0.0, self.sigma))
        if rng.random() < self.straggler_p:
            body *= self.straggler_x
        return round(body, 3)  # millisecond resolution: exact sums on the virtual clock


@dataclass(frozen=True)
class Node:
    key: str  # also its `_id` and its state path, `state.<key>`
    tool: str
    deps: tuple[str, ...]
    latency: float


@dataclass
class Workload:
    name: str
    title: str
    nodes: list[Node]
    seed: int
    meta: dict[str, int] = field(default_factory=dict)

    @property
    def by_key(self) -> dict[str, Node]:
        return {node.key: node for node in self.nodes}

    @property
    def has_dependency(self) -> bool:
        return any(node.deps for node in self.nodes)

    def levels(self) -> list[list[Node]]:
        """Calls grouped by depth: level k holds the calls whose deps are all in levels < k.

        This is exactly what a per-turn loop can run in turn k: what it ran before has all
        finished when it asks again, and nothing else is runnable yet.
        """
        depth: dict[str, int] = {}
        for node in self.nodes:
            depth[node.key] = 1 + max((depth[d] for d in node.deps), default=-1)
        out: list[list[Node]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for node in self.nodes:
            out[depth[node.key]].append(node)
        return out

    def tools(self) -> list[str]:
        return sorted({node.tool for node in self.nodes})

    def critical_path(self) -> float:
        finish: dict[str, float] = {}
        for node in self.nodes:
            finish[node.key] = max((finish[d] for d in node.deps), default=0.0) + node.latency
        return max(finish.values(), default=0.0)

    def edges(self) -> int:
        return sum(len(node.deps) for node in self.nodes)


def _layers(
    name: str, title: str, widths: list[tuple[str, int]], seed: int, lat: LatencyModel
) -> Workload:
    """Layered plan: every call of layer k reads every call of layer k-1."""
    rng = random.Random(seed)
    nodes: list[Node] = []
    previous: list[str] = []
    for layer, (tool, width) in enumerate(widths):
        keys = [f"{tool[0]}{layer}_{i}" for i in range(width)]
        nodes.extend(Node(key, tool, tuple(previous), lat.draw(rng)) for key in keys)
        previous = keys
    return Workload(name, title, nodes, seed)


def two_hop(seed: int = 1, lat: LatencyModel = LatencyModel()) -> Workload:
    """Two independent lookups; the final request answers from both."""
    return _layers("two_hop", "two-hop question (2 lookups → answer)", [("lookup", 2)], seed, lat)


def eight_way(seed: int = 2, lat: LatencyModel = LatencyModel()) -> Workload:
    """Eight independent lookups; the final request compares them."""
    return _layers(
        "eight_way", "eight-way comparison (8 lookups → compare)", [("lookup", 8)], seed, lat
    )


def fan_out_fan_in(seed: int = 3, lat: LatencyModel = LatencyModel()) -> Workload:
    """Four searches; two computations over two searches each; one comparison of both."""
    rng = random.Random(seed)
    nodes = [Node(f"s{i}", "search", (), lat.draw(rng)) for i in range(4)]
    nodes += [
        Node("m0", "compute", ("s0", "s1"), lat.draw(rng)),
        Node("m1", "compute", ("s2", "s3"), lat.draw(rng)),
        Node("cmp", "compare", ("m0", "m1"), lat.draw(rng)),
    ]
    return Workload("fan_out_fan_in", "fan-out/fan-in (4 → 2 → 1)", nodes, seed)


def chain(seed: int = 4, lat: LatencyModel = LatencyModel(), length: int = 6) -> Workload:
    rng = random.Random(seed)
    nodes: list[Node] = []
    for i in range(length):
        deps = (f"k{i - 1}",) if i else ()
        nodes.append(Node(f"k{i}", "step", deps, lat.draw(rng)))
    return Workload("chain", f"{length}-step chain", nodes, seed)


def wide_then_narrow(seed: int = 5, lat: LatencyModel = LatencyModel()) -> Workload:
    """32 searches; 8 summaries of 4 searches each; 1 synthesis of the 8 summaries."""
    rng = random.Random(seed)
    nodes = [Node(f"w{i}", "search", (), lat.draw(rng)) for i in range(32)]
    nodes += [
        Node(f"n{j}", "summarize", tuple(f"w{4 * j + i}" for i in range(4)), lat.draw(rng))
        for j in range(8)
    ]
    nodes.append(Node("top", "synthesize", tuple(f"n{j}" for j in range(8)), lat.draw(rng)))
    return Workload("wide_then_narrow", "wide-then-narrow (32 → 8 → 1)", nodes, seed)


def random_dag(n: int, seed: int, lat: LatencyModel = LatencyModel()) -> Workload:
    """n calls in written order; each reads 0-3 earlier calls chosen uniformly.

    About a third of the calls are roots (searches); the rest read what came before,
    which gives plans a few levels deep, as a model writes them.
    """
    rng = random.Random(seed)
    nodes: list[Node] = []
    for i in range(n):
        k = min(i, rng.choice((0, 0, 1, 1, 2, 3)))
        deps = tuple(sorted(rng.sample(range(i), k))) if k else ()
        tool = "search" if not deps else ("compute" if len(deps) == 1 else "combine")
        nodes.append(Node(f"r{i}", tool, tuple(f"r{d}" for d in deps), lat.draw(rng)))
    return Workload(f"random_{n}", f"random DAG, {n} calls", nodes, seed)


def all_workloads(lat: LatencyModel = LatencyModel()) -> list[Workload]:
    return [
        two_hop(lat=lat),
        eight_way(lat=lat),
        fan_out_fan_in(lat=lat),
        chain(lat=lat),
        wide_then_narrow(lat=lat),
        random_dag(20, seed=20, lat=lat),
        random_dag(50, seed=50, lat=lat),
        random_dag(100, seed=100, lat=lat),
        random_dag(200, seed=200, lat=lat),
    ]


SHAPES = {
    "two_hop": two_hop,
    "eight_way": eight_way,
    "fan_out_fan_in": fan_out_fan_in,
    "chain": chain,
    "wide_then_narrow": wide_then_narrow,
}


def make(name: str, seed: int, lat: LatencyModel = LatencyModel()) -> Workload:
    """Workload `name` (as in `all_workloads`) with another seed for its latencies."""
    if name.startswith("random_"):
        return random_dag(int(name.removeprefix("random_")), seed=seed, lat=lat)
    return SHAPES[name](seed=seed, lat=lat)
