"""Cycles in a graph of module imports, for the tests of the project's layers."""

from __future__ import annotations

from collections.abc import Mapping, Set

__all__ = ["cycles"]


def cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of ``graph`` (module -> modules it imports) meets, each as the path
    from a module back to itself; empty when the graph has none."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the walk's stack, 2: done

    def walk(name: str, stack: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                walk(dep, [*stack, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    return found
