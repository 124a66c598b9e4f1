"""`python -m snakemake`, with the Slurm plugin's status checks kept at their first interval.

The plugin (snakemake-executor-plugin-slurm, `check_active_jobs`) waits 10 s longer after each
status check that finds no job finished, up to 3 minutes, and starts over at
`--slurm-init-seconds-before-status-checks` when one has. On a cluster that saves sacct calls;
in the tests, whose jobs last seconds and whose DAG is a dozen levels deep, each level's end was
noticed up to half a minute late. Here the interval never grows past its first value. Nothing
else changes: the profile, the jobs and what Slurm runs are the users'. The profile's own
setting is checked where it is rendered (tests/test_slurm.py). A plugin without the attribute
this relies on fails here, loudly, rather than running at another cadence unnoticed.
"""
import runpy
import sys

from snakemake_executor_plugin_slurm import Executor

def install() -> None:
    growing = Executor.next_seconds_between_status_checks  # the interface's property, set by the plugin
    if not isinstance(growing, property) or growing.fset is None:
        sys.exit("prompt_status: the Slurm plugin's Executor has no settable next_seconds_between_status_checks")

    def capped(self, seconds):
        growing.fset(self, min(seconds, getattr(self.workflow.executor_settings, "init_seconds_before_status_checks", 40)))

    Executor.next_seconds_between_status_checks = property(growing.fget, capped)


if __name__ == "__main__":
    install()
    sys.argv[0] = "snakemake"
    runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
