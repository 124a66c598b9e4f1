"""best_over_lr: the reported learning rate among tied best means."""
import pandas as pd

from arrepro.report.aggregate import best_over_lr


def cells(accs):
    return pd.DataFrame([{"series": "s", "task": "t", "task_name": "t", "seq_len": 64, "model": "m", "mixer": "m",
                          "width": 64, "layers": 2, "recipe": "r", "lr": lr, "seed": s, "final_accuracy": a,
                          "diverged": False, "parameters": 1} for lr, per_seed in accs.items() for s, a in enumerate(per_seed)])


def test_ties_take_the_middle_learning_rate_and_are_counted():
    # five LRs, the middle three all at 1.0 for both seeds: idxmax used to report the smallest, 1e-3
    b = best_over_lr(cells({1e-4: [0.2, 0.3], 1e-3: [1.0, 1.0], 1e-2: [1.0, 1.0], 1e-1: [1.0, 1.0], 1.0: [0.0, 0.0]}))
    assert len(b) == 1 and b["best_lr"].iloc[0] == 1e-2 and b["n_tied_lrs"].iloc[0] == 3
    assert b["mean"].iloc[0] == 1.0 and b["n_seeds"].iloc[0] == 2
    b = best_over_lr(cells({1e-3: [1.0], 1e-2: [1.0]}))
    assert b["best_lr"].iloc[0] == 1e-3 and b["n_tied_lrs"].iloc[0] == 2  # even: the lower middle
    b = best_over_lr(cells({1e-3: [0.5, 0.7], 1e-2: [0.9, 0.8], 1e-1: [0.1, 0.2]}))
    assert b["best_lr"].iloc[0] == 1e-2 and b["n_tied_lrs"].iloc[0] == 1 and abs(b["std"].iloc[0] - 0.0707) < 1e-3
