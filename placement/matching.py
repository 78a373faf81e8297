"""Maximum matching in a general graph (Edmonds' blossom algorithm, O(V^3)).

Megaphone groups migrations that do not interfere by a bipartite matching of senders to receivers. Here
a node may both send one partition and receive another, and a batch must not use any node twice, so
the conflict graph has nodes as vertices and moves as edges, and is not bipartite in general: odd
cycles (A sends to B, B to C, C to A) need blossoms.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


def maximum_matching(vertices: int, edges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """A maximum set of edges of which no two share a vertex; self-loops are ignored."""
    adjacent: list[list[int]] = [[] for _ in range(vertices)]
    for u, v in edges:
        if u != v:
            adjacent[u].append(v)
            adjacent[v].append(u)
    mate = [-1] * vertices
    for root in range(vertices):
        if mate[root] == -1 and adjacent[root]:
            end, parent = _augmenting_path(root, adjacent, mate)
            while end != -1:  # flip the path's edges in and out of the matching
                previous = parent[end]
                after = mate[previous]
                mate[end], mate[previous] = previous, end
                end = after
    return [(u, mate[u]) for u in range(vertices) if mate[u] > u]


def _augmenting_path(root: int, adjacent: list[list[int]], mate: list[int]) -> tuple[int, list[int]]:
    """BFS from `root` for a free vertex, shrinking odd cycles (blossoms) into their base."""
    n = len(adjacent)
    parent = [-1] * n
    base = list(range(n))
    in_tree = [False] * n
    in_tree[root] = True
    queue = deque([root])

    def common_base(a: int, b: int) -> int:
        seen = [False] * n
        while True:
            a = base[a]
            seen[a] = True
            if mate[a] == -1:
                break
            a = parent[mate[a]]
        while True:
            b = base[b]
            if seen[b]:
                return b
            b = parent[mate[b]]

    def mark_blossom(v: int, stem: int, child: int, blossom: list[bool]) -> None:
        while base[v] != stem:
            blossom[base[v]] = blossom[base[mate[v]]] = True
            parent[v] = child
            child = mate[v]
            v = parent[mate[v]]

    while queue:
        v = queue.popleft()
        for to in adjacent[v]:
            if base[v] == base[to] or mate[v] == to:
                continue
            if to == root or (mate[to] != -1 and parent[mate[to]] != -1):
                stem = common_base(v, to)
                blossom = [False] * n
                mark_blossom(v, stem, to, blossom)
                mark_blossom(to, stem, v, blossom)
                for i in range(n):
                    if blossom[base[i]]:
                        base[i] = stem
                        if not in_tree[i]:
                            in_tree[i] = True
                            queue.append(i)
            elif parent[to] == -1:
                parent[to] = v
                if mate[to] == -1:
                    return to, parent
                in_tree[mate[to]] = True
                queue.append(mate[to])
    return -1, parent
