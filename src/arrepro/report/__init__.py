"""The report stage: the best-over-LR tables from the cells and the search decisions (aggregate),
the claims judged on them, the tables, figures, the paper's numbers and text, fidelity to the
sources, and the drawings of Mamba's blocks."""
