"""The paper's Figs. 8-10 (its Appendix A.1): the Mamba block and its ablations, drawn from the
modules the workflow trains.

``block_models`` picks, of the models a scale trains, the Mamba block and its three ablations
(``PAPER_FIGURES``); ``build`` builds each with the trainer's own ``build_model`` from the scale's
config; ``block_boxes`` walks the built modules of one layer (the backbone's ``Block``: its norms,
mixer and MLP, and the Mamba mixer's projections, conv1d, gate and S6 parameters) into the boxes
of a block diagram, each naming the module it stands for and its parameter count; ``draw`` lays
them out with matplotlib. A component a model lacks (no ``conv1d`` module, an ``in_proj`` without
the gate's half, no MLP) has no box: what is drawn is what is trained.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# config model -> (the paper's figure number, or None, and the panel's title)
PAPER_FIGURES = {
    "mamba": (None, "Mamba (the block the others ablate)"),
    "s6_mlp": (8, "S6 + MLP (Mamba as a Transformer)"),
    "mamba_noconv": (9, "Mamba without conv1d"),
    "mamba_nogate": (10, "Mamba without the gate"),
}
FIGURE = "blocks"  # results/{scale}/blocks.pdf and .png


@dataclass
class Box:
    """One box of the diagram: ``key`` (what it is: in_proj, conv1d, silu_x, s6, gate, mul,
    out_proj, add, norm1, norm2, mlp, add_mlp), its ``text``, the ``module`` path it stands for
    (None for an operation without parameters), its parameter count, and its column (0: the main
    path, 1: the gate branch)."""

    key: str
    text: str
    module: str | None = None
    params: int = 0
    column: int = 0
    inputs: list[str] = field(default_factory=list)


def block_models(grid) -> dict[str, dict]:
    """The models of ``PAPER_FIGURES`` that the scale trains (in that order) -> the setting each is
    built at: the setting that most of them share (the ablation table's), else the model's
    smallest width, so that the panels' parameter counts compare."""
    settings = {}
    for model in PAPER_FIGURES:
        found = {(int(w), int(nl), t, g["recipe"]) for e in grid.experiments.values() for g in e["grids"]
                 if model in g["models"] for t in g["tasks"] for w in g["widths"] for nl in g["layers"]}
        if found:
            settings[model] = found
    shared = {}
    for found in settings.values():
        for s in found:
            shared[s] = shared.get(s, 0) + 1
    order = sorted(shared, key=lambda s: (-shared[s], s))
    out = {}
    for model, found in settings.items():
        w, nl, t, recipe = next(s for s in order if s in found)
        out[model] = {"task": t, "width": w, "layers": nl, "recipe": recipe}
    return out


def specs(grid) -> dict[str, dict]:
    """``block_models``' models as the cell specs the trainer builds them from (one learning rate
    and seed stand for all: neither changes the modules)."""
    from arrepro.config.grid import identity

    out = {}
    for model, s in block_models(grid).items():
        c = grid.cell(s["task"], model, s["width"], s["layers"], s["recipe"], 1e-3, 0)
        out[model] = identity(grid.spec_of(c))  # (what a cell's train rule passes on)
    return out


def build(spec: dict):
    """The model a cell of ``spec`` trains (arrepro.train.loop.build_model), on the CPU."""
    from arrepro.data import task_seq_len
    from arrepro.train.prepare import build_model

    task = spec["task_def"]
    return build_model(spec, task["vocab_size"], task_seq_len(task))


def _n(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def block_boxes(model) -> list[Box]:
    """The first layer of a built ``LanguageModel`` whose mixer is a Mamba block, as boxes from
    input to output. Each component comes from a module (or a flag the module's forward reads):
    ``in_proj`` feeds the gate branch when it has twice the inner width's outputs; ``conv1d`` is
    drawn where the mixer has one; the MLP where the block has one."""
    from arrepro.models.mixers.mamba import Mamba

    block = model.layers[0]
    m = block.mixer
    if not isinstance(m, Mamba):
        raise ValueError(f"block_boxes draws a Mamba block; the model's mixer is {type(m).__name__}")
    D, E, N = m.in_proj.in_features, m.d_inner, m.d_state
    gated = m.in_proj.out_features == 2 * E
    if gated != bool(m.gate):
        raise ValueError(f"Mamba block: in_proj has {m.in_proj.out_features} outputs, gate={m.gate}")
    p = "layers.0.mixer"
    boxes = [Box("norm1", "LayerNorm", "layers.0.norm1", _n(block.norm1)),
             Box("in_proj", f"in_proj: Linear D→{'2E' if gated else 'E'}", f"{p}.in_proj", _n(m.in_proj),
                 inputs=["norm1"])]
    x = "in_proj"
    if m.conv1d is not None:
        k = m.conv1d.kernel_size
        boxes.append(Box("conv1d", f"conv1d: causal, depthwise,\nkernel {k}", f"{p}.conv1d", _n(m.conv1d), inputs=[x]))
        x = "conv1d"
    boxes.append(Box("silu_x", "SiLU", inputs=[x]))
    s6 = [m.x_proj, m.dt_proj]
    boxes.append(Box("s6", f"S6 selective scan, N={N}\nx_proj, dt_proj, A, D", f"{p}.{{x_proj,dt_proj,A_log,D}}",
                     sum(_n(t) for t in s6) + m.A_log.numel() + m.D.numel(), inputs=["silu_x"]))
    y = "s6"
    if gated:
        boxes.append(Box("silu_z", "SiLU", column=1, inputs=["in_proj"]))
        boxes.append(Box("mul", "×", inputs=["s6", "silu_z"]))
        y = "mul"
    boxes.append(Box("out_proj", "out_proj: Linear E→D", f"{p}.out_proj", _n(m.out_proj), inputs=[y]))
    boxes.append(Box("add", "+", inputs=["out_proj", "input"]))
    if block.mlp is not None:
        ratio = block.mlp.fc1.out_features // D
        boxes.append(Box("norm2", "LayerNorm", "layers.0.norm2", _n(block.norm2), inputs=["add"]))
        boxes.append(Box("mlp", f"MLP: Linear D→{ratio}D, GELU,\nLinear {ratio}D→D", "layers.0.mlp", _n(block.mlp),
                         inputs=["norm2"]))
        boxes.append(Box("add_mlp", "+", inputs=["mlp", "add"]))
    return boxes


def sizes(model) -> dict[str, int]:
    """The block's dimensions as built: D (width), E (inner width), N (state), layers."""
    m = model.layers[0].mixer
    return {"D": m.in_proj.in_features, "E": m.d_inner, "N": m.d_state, "layers": len(model.layers)}


def _fmt(n: int) -> str:
    return f"{n:,}"


OPS = {"add", "add_mlp", "mul"}  # drawn as circles
COLORS = {"conv1d": "#fde0c5", "s6": "#d6e9f8", "silu_z": "#e3f1dc", "mlp": "#ece2f4"}
GATE_X, RESIDUAL_X, BOX_W, BOX_H, R = 1.75, -1.25, 2.0, 0.56, 0.15


def layout(boxes: list[Box]) -> dict[str, tuple[float, float]]:
    """Each box's centre: the main path upwards from the input at (0, 0); the gate branch beside
    the main path's first box above in_proj."""
    pos, y = {"input": (0.0, 0.0)}, 0.0
    for b in boxes:
        if b.column == 0:
            y += 0.8 if b.key in OPS or b.key == "silu_x" else 1.0
            pos[b.key] = (0.0, y)
    for b in boxes:
        if b.column == 1:
            pos[b.key] = (GATE_X, pos[b.inputs[0]][1] + 1.0)
    return pos


def _draw_panel(ax, boxes: list[Box], title: str, size: dict, height: float) -> None:
    """One block, bottom (input) to top (output); the gate branch on the right, the residual
    connections on the left."""
    from matplotlib.patches import Circle, FancyBboxPatch

    pos = layout(boxes)
    top = max(y for _, y in pos.values()) + 0.8
    line = {"color": "0.25", "lw": 1.0}
    arrow = {"arrowstyle": "-|>", "shrinkA": 0, "shrinkB": 0, **line}

    def half_h(key):
        return 0.0 if key == "input" else R if key in OPS else BOX_H / 2

    def half_w(key):
        return R if key in OPS else (0.95 if key == "silu_z" else BOX_W) / 2

    def to(xy, xytext):
        ax.annotate("", xy=xy, xytext=xytext, arrowprops=arrow)

    for b in boxes:
        x0, y0 = pos[b.key]
        if b.key in OPS:
            ax.add_patch(Circle((x0, y0), R, fc="white", ec="0.3", lw=0.9))
            ax.text(x0, y0, b.text, ha="center", va="center", fontsize=10)
        else:
            w = 2 * half_w(b.key)
            ax.add_patch(FancyBboxPatch((x0 - w / 2, y0 - BOX_H / 2), w, BOX_H, boxstyle="round,pad=0.02,rounding_size=0.08",
                                        fc=COLORS.get(b.key, "#f2f2f2"), ec="0.3", lw=0.9))
            label = b.text + (f"\n{_fmt(b.params)} parameters" if b.params else "")
            ax.text(x0, y0, label, ha="center", va="center", fontsize=6.2, linespacing=1.1)
        for src in b.inputs:
            sx, sy = pos[src]
            if b.key in ("add", "add_mlp") and src in ("input", "add"):  # a residual, round the left
                start = sy if src == "input" else sy + R + 0.15
                ax.plot([sx, RESIDUAL_X, RESIDUAL_X], [start, start, y0], **line)
                ax.plot([sx], [start], marker="o", ms=2.5, color="0.25")
                to((x0 - R, y0), (RESIDUAL_X, y0))
            elif b.column == 1:  # into the gate branch: right, then up
                ax.plot([sx + half_w(src), x0], [sy, sy], **line)
                to((x0, y0 - BOX_H / 2), (x0, sy))
            elif sx != x0:  # out of the gate branch: up, then left
                ax.plot([sx, sx], [sy + BOX_H / 2, y0], **line)
                to((x0 + R, y0), (sx, y0))
            else:
                to((x0, y0 - half_h(b.key)), (sx, sy + half_h(src)))
    last = boxes[-1].key
    to((0.0, top), (0.0, pos[last][1] + half_h(last)))
    ax.text(0.0, -0.08, "input (from the layer below)", ha="center", va="top", fontsize=6.5)
    ax.text(0.0, top + 0.05, "output", ha="center", va="bottom", fontsize=6.5)
    ax.text(RESIDUAL_X - 0.05, 0.45, "residual", rotation=90, fontsize=6, color="0.35", ha="right", va="bottom")
    ax.set_xlim(RESIDUAL_X - 0.3, GATE_X + 0.55)
    ax.set_ylim(-0.55, height + 0.35)
    ax.axis("off")
    ax.set_title(title, fontsize=8.5)
    ax.text(0.0, -0.5, f"D={size['D']} (width), E={size['E']}, N={size['N']}", fontsize=6.5, ha="center",
            va="bottom", color="0.35")


def panel_title(model: str) -> str:
    number, text = PAPER_FIGURES[model]
    return f"{f'the paper’s Fig. {number}' if number else 'reference'}\n{text}\n(model {model})"


def structure(specs_: dict[str, dict]) -> list[dict]:
    """Each spec's model built as the trainer builds it, walked: [{"model": name, "boxes": [...],
    "sizes": {...}, ...}] in ``specs_``' order (JSON-ready: the rule ``block_structure`` writes it,
    in the training software's env)."""
    import torch

    torch.manual_seed(0)
    out = []
    for name, spec in specs_.items():
        model = build(spec)
        out.append({"model": name, "boxes": [asdict(b) for b in block_boxes(model)], "sizes": sizes(model),
                    "width": spec["width"], "layers": spec["layers"], "task": spec["task"]})
    return out


def write_structure(specs_: dict[str, dict], path) -> None:
    from arrepro.files import write_json_atomic

    write_json_atomic(path, {"blocks": structure(specs_)})


def draw(blocks: list[dict], title: str, scale: str, paths) -> None:
    """One panel per model of ``structure``'s output, each one layer of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from arrepro.report.plots import _finish

    boxes = {d["model"]: [Box(**b) for b in d["boxes"]] for d in blocks}
    height = max(max(y for _, y in layout(b).values()) + 0.8 for b in boxes.values())
    fig, axes = plt.subplots(1, len(blocks), figsize=(2.6 * len(blocks), 0.55 * height + 1.6), squeeze=False)
    for ax, d in zip(axes[0], blocks):
        _draw_panel(ax, boxes[d["model"]], panel_title(d["model"]), d["sizes"], height)
    _finish(fig, title, scale, paths)


def render(structure_json, title: str, scale: str, paths) -> None:
    """The figure from the structure file (no torch needed: the plotting env draws it)."""
    import json
    from pathlib import Path

    draw(json.loads(Path(structure_json).read_text())["blocks"], title, scale, paths)
