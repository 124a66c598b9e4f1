"""The recipe_window table end to end on the tiny scale: one setting trained under two recipes (the
sources' and the earlier one, decay matrices and init normal), its two rows side by side, each
recipe its own cells (a recipe switch changes the cell's definition)."""
import pandas as pd

from test_workflow import edit_config, smk
from workflow_copy import copy_workflow


def test_a_setting_under_two_recipes_has_two_rows_and_its_own_cells(tmp_path):
    wd = copy_workflow(tmp_path)

    def two_recipes(c):
        s = c["scales"]["tiny"]
        s["recipes"]["tiny_prior"] = {**s["recipes"]["tiny"], "decay": "matrices", "init": "normal"}
        grid = s["experiments"]["fig2"]["grids"][0]
        s["experiments"]["tablerecipe"] = {
            "title": "two recipes", "table": "recipe_window", "claims_of": ["fig2"],
            "grids": [{**grid, "series": "the sources' recipe"},
                      {**grid, "series": "the earlier recipe", "recipe": "tiny_prior"}]}
    edit_config(wd, two_recipes)
    smk(wd, "--cores", "2", "results/tiny/tablerecipe.csv", "--config", "scale=tiny")
    t = pd.read_csv(wd / "results/tiny/tablerecipe.csv")
    assert list(t["recipe"]) == ["tiny (decay all, init zoology)", "tiny_prior (decay matrices, init normal)"]
    assert t.columns[:5].tolist() == ["task", "model", "width", "layers", "recipe"]
    cells = pd.read_csv(wd / "results/tiny/tables/tablerecipe_cells.csv")
    assert cells.groupby("recipe")["cell_dir"].nunique().to_dict() == {r: 2 for r in cells["recipe"].unique()}
    assert cells["recipe"].nunique() == 2 and cells["cell_dir"].nunique() == 4
    # the earlier recipe leaves the embeddings, norms and biases undecayed: another test loss at the same
    # rate and seed (4 steps: the same first weights, an attention model's under both rules)
    loss = cells.sort_values(["recipe", "lr"]).groupby("recipe")["final_test_loss"].apply(list)
    assert loss.iloc[0] != loss.iloc[1]
