"""Cells per GPU: packs of small cells that share one GPU of a grouped Slurm job (the rule
``gpu_pack``, workflow/rules/gpushare.smk), and why they take this form.

How Snakemake 9 runs a group job on Slurm (snakemake 9.27, executor plugin slurm 2.8.0,
jobstep 0.6.1; read in their source): the submitting process computes the group's resources
layer by layer (``GroupResources.basic_layered``): jobs of one DAG level are packed into layers
that fit the constraints of its ``--resources`` (here ``train_slot``); within a layer resources
add up, ``runtime`` takes the maximum; over layers ``runtime`` adds up and the rest takes the
maximum; a string resource must be the same for every job of the group and is taken as is. The
Slurm job then runs ``snakemake --executor slurm-jobstep --jobs 1`` without the profile's
``--resources`` or ``--group-components``: each connected component of the group becomes an
``srun`` step of its own, one after another (the plugin's open issue "Group jobs run
sequentially on Slurm"), and inside a step a local Snakemake (``--cores all``: the CPUs the
step may use) runs the component's jobs, in parallel where they are independent.

Cells per GPU (``cells_per_gpu`` = N, the profile's ``CELLS_PER_GPU``; 1 = the above, unchanged).
Because of ``--jobs 1`` a group's cells can only share a GPU if they form one component: N cells
of one setting (same task, model, width, layers and recipe, hence the same estimate; ordered by
lr and seed) make a *pack*, whose marker (rule ``gpu_pack``, in the cells' group) takes the N
results as input. A pack is one ``srun`` step that runs its N cells at once, each its own
process, all seeing the job's one GPU (the step gets every GRES of the job; CUDA_VISIBLE_DEVICES
is the same). So that the Slurm job asks for one GPU and not N, a shared cell requests no
``gpu`` but the string resource ``gres="gpu:1"`` (not summed over a layer), and the profile sets
``train_slot`` to N: the submitting process then layers N cells side by side, requesting N CPUs,
N cells' memory and per layer the longest cell's time. Only grouped (small) cells share; big
cells keep a GPU each. A pack's cells have one estimate, so the submitting process's sum over
layers is exactly the packs' times when packs are full; a pack left short (the last of a
setting, or cells already done) can make the request short by up to one pack's time, which the
safety factor and the retry (twice the time, resuming from checkpoints) absorb.

Each cell's time when it shares: arrepro.config.costs.
"""
from __future__ import annotations

import functools
import os

from arrepro.config.cellfiles import RESULT
from arrepro.config.costs import sharing
from arrepro.config.grid import CELL_PATTERN

# a pack's marker (and its log), in the folder its cells share: npack cells per GPU, the kpack-th
PACK_PATTERN = CELL_PATTERN.rsplit("/", 1)[0] + "/gpu-pack{npack}-{kpack}.done"
PACK_LOG = PACK_PATTERN.removesuffix(".done") + ".log"


def packs(grid, cells_per_gpu: int, cells=None) -> dict[str, list]:
    """Marker path -> the cells of that pack: the grouped cells of each setting (a folder of
    cells differing only in lr and seed), ordered by (lr, seed), in chunks of ``cells_per_gpu``.
    Empty when ``cells_per_gpu`` is 1."""
    if cells_per_gpu <= 1:
        return {}
    cells = grid.all_cells() if cells is None else list(cells)
    by_setting: dict[str, list] = {}
    for c in cells:
        by_setting.setdefault(c.path.rsplit("/", 1)[0], []).append(c)
    out = {}
    for setting, members in by_setting.items():
        if sharing(grid.spec_of(members[0]), cells_per_gpu) == 1:
            continue
        members = sorted(members, key=lambda c: (float(c.lr), c.seed))
        for k in range(0, len(members), cells_per_gpu):
            marker = PACK_PATTERN.format(**vars(members[0]), npack=cells_per_gpu, kpack=k // cells_per_gpu)
            out[marker] = members[k:k + cells_per_gpu]
    return out


class Packs:
    """The packs of some cells of a grid, computed on first use (only workflows with
    cells_per_gpu > 1 do). ``cells``: a function giving the cells to pack (the learning-rate
    searches' round 0: cells of later rounds, planned as the searches go, run unpacked)."""

    def __init__(self, grid, cells_per_gpu: int, cells=None):
        self.grid, self.cells_per_gpu, self._cells = grid, cells_per_gpu, cells

    @functools.cached_property
    def by_marker(self) -> dict[str, list]:
        return packs(self.grid, self.cells_per_gpu, None if self._cells is None else self._cells())

    def cells(self, marker: str) -> list:
        if marker not in self.by_marker:
            raise ValueError(f"{marker}: not a pack of cells_per_gpu={self.cells_per_gpu} "
                             f"at scale {self.grid.scale_name}")
        return self.by_marker[marker]

    def spec(self, marker: str) -> dict:
        """The cell spec of the pack's first cell (all of them have the same size)."""
        return self.grid.spec_of(self.cells(marker)[0])

    def targets(self, wildcards=None) -> list[str]:
        """The markers ``all`` asks for: every pack with a cell still to train, and those already
        made (a finished pack whose marker is missing is left alone rather than spending a
        Slurm job on a marker)."""
        return [m for m, cells in self.by_marker.items()
                if os.path.exists(m) or not all(os.path.exists(f"{c.path}/{RESULT}") for c in cells)]
