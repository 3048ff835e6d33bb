"""A workflow's page: its steps and their states, durations, and the dependencies drawn
as a graph, server-rendered (docs/operations/dashboard.md, docs/concepts/workflows.md).

The graph is laid out in layers by dependency depth: a step that waits for no other
step of the workflow is in layer 0, any other one layer past the deepest step it waits
for. Each layer is a column, its steps in the order added; the edges are straight SVG
lines from a dependency's right edge to its dependent's left edge. No script draws it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from venturi.workflow import StepState, WorkflowState

from .dashboard import dashboard

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 180, 46, 70, 18, 8


@dataclass(frozen=True, slots=True)
class Node:
    step: StepState
    layer: int
    x: int
    y: int
    after: tuple[str, ...]  # names of the steps it waits for (ids for outside jobs)


@dataclass(frozen=True, slots=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    status: str  # the dependency's: whether this edge is satisfied


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def depths(steps: list[StepState]) -> dict[uuid.UUID, int]:
    """Each step's layer: 0 without a dependency inside the workflow, else one past the
    deepest one (the steps form a DAG: enqueue_workflow refuses a cycle)."""
    inside = {s.id: s for s in steps}
    found: dict[uuid.UUID, int] = {}

    def depth(id: uuid.UUID, seen: frozenset[uuid.UUID]) -> int:
        if id in found:
            return found[id]
        deps = [a for a in inside[id].after if a in inside and a not in seen]
        found[id] = 1 + max((depth(a, seen | {id}) for a in deps), default=-1)
        return found[id]

    for s in steps:
        depth(s.id, frozenset())
    return found


def layout(state: WorkflowState) -> Graph:
    layer_of = depths(state.steps)
    names = {s.id: s.name for s in state.steps}
    rows: dict[int, int] = {}
    nodes: dict[uuid.UUID, Node] = {}
    for s in state.steps:
        layer = layer_of[s.id]
        row = rows.get(layer, 0)
        rows[layer] = row + 1
        nodes[s.id] = Node(s, layer, PAD + layer * (NODE_W + GAP_X),
                           PAD + row * (NODE_H + GAP_Y),
                           tuple(names.get(a, str(a)) for a in s.after))
    edges = []
    for node in nodes.values():
        for a in node.step.after:
            dep = nodes.get(a)
            if dep is None:
                continue
            status = "gone" if dep.step.status is None else dep.step.status.value
            edges.append(Edge(dep.x + NODE_W, dep.y + NODE_H // 2,
                              node.x, node.y + NODE_H // 2, status))
    layers = max(layer_of.values(), default=0) + 1
    tallest = max(rows.values(), default=1)
    return Graph(list(nodes.values()), edges, 2 * PAD + layers * NODE_W + (layers - 1) * GAP_X,
                 2 * PAD + tallest * NODE_H + (tallest - 1) * GAP_Y)


async def workflow_page(request: Request) -> Response:
    dash = dashboard(request)
    raw = request.path_params["id"]
    try:
        id = uuid.UUID(raw)
    except ValueError:
        raise HTTPException(404, f"{raw[:80]!r} is not a workflow id") from None
    state = await dash.queue.workflow(id)
    if state is None:
        raise HTTPException(404, f"workflow {id} does not exist")
    unfinished = sum(1 for s in state.steps
                     if s.status is not None and s.status.value in ("pending", "claimed"))
    return await dash.page(request, "workflow.html", "", wf=state, graph=layout(state),
                           counts=state.counts(), unfinished=unfinished,
                           node_w=NODE_W, node_h=NODE_H)


def routes() -> list[BaseRoute]:
    return [Route("/workflows/{id}", workflow_page, name="workflow")]
