"""A workaround for Snakemake 9.x's ``group-components``, installed by the Snakefile.

The Slurm profile bundles small training cells: ``group-components: {cells_10min: 24, ...}``
asks Snakemake to put that many connected components of a group into one Slurm job. Snakemake
9.27 forms them in ``DAG._update_group_components`` by merging each chunk's group jobs into the
first one, in place (``GroupJob.merge``). But its ``GroupJobFactory`` caches every group job under
the job set it was created with, and the DAG is post-processed several times (after each
checkpoint, and on a second pass): each time, a cell's lookup returns the group job already grown
by the previous merge, and chunks are merged again. Bundles then hold 2-4 chunks, and some cells
land in two bundles (46 of fig1's 480 round-0 cells at the paper scale): two Slurm jobs train the
same cell (one fails on its lock, and Snakemake removes the outputs of the failed copy).

``install()`` replaces that one method by one that merges without mutating: a bundle is a new
group job made by the factory for the union of its chunk's jobs (so the same chunk gives the same
object on every pass), chunks taken in a fixed order (by the cells' output paths), never the
set's iteration order. Nothing else changes. It installs only on the Snakemake versions it was
checked against, and says so otherwise (tests/test_slurm.py checks the bundles of a paper dry run).
"""
from __future__ import annotations

import sys
from collections import defaultdict

CHECKED = ("9.",)  # the Snakemake major versions whose DAG this was checked against


def _sort_key(group) -> tuple:
    return tuple(sorted(str(f) for job in group.jobs for f in job.output))


def _update_group_components(self) -> None:
    """Snakemake's DAG._update_group_components, merging chunks into new group jobs."""
    by_id = defaultdict(set)
    for group in self._group.values():
        by_id[group.groupid].add(group)
    for groupid, components in by_id.items():
        n = self.workflow.group_settings.group_components.get(self.workflow.parent_groupids.get(groupid, groupid), 1)
        if n <= 1:
            continue
        ordered = sorted(components, key=_sort_key)
        for i in range(0, len(ordered), n):
            chunk = ordered[i:i + n]
            if len(chunk) == 1:
                continue
            jobs = frozenset(j for g in chunk for j in g.jobs)
            bundle = self.group_job_factory.new(groupid, jobs, self.workflow.global_resources)
            for j in jobs:
                self._group[j] = bundle
    for group in set(self._group.values()):
        group.finalize()


def install() -> bool:
    """Replace the method (once); False, with a warning on stderr, on an unchecked Snakemake."""
    import snakemake
    from snakemake.dag import DAG

    if DAG._update_group_components is _update_group_components:
        return True
    if not snakemake.__version__.startswith(CHECKED) or not hasattr(DAG, "_update_group_components"):
        print(f"arrepro: Snakemake {snakemake.__version__} is not one the group-components workaround was checked "
              f"against ({__spec__.name}): bundles of Slurm jobs are as Snakemake forms them", file=sys.stderr)
        return False
    DAG._update_group_components = _update_group_components
    return True
