# Stage 5: the manuscript, results/paper.pdf. Its prose is paper/main.tex; every number in it is a
# macro that paper_numbers computes from the experiments' tables, and it includes every figure
# (results/EXP.pdf) and table (results/EXP.tex) that the scale declares (the Snakefile's FIGURES
# and TABLES, from GRID.experiments).


rule paper_numbers:
    output:
        numbers="results/paper/numbers.tex",
        setup="results/paper/setup.tex",
    input:
        best=[f"results/tables/{e}_best.csv" for e in EXPERIMENTS],
        cells=[f"results/tables/{e}_cells.csv" for e in EXPERIMENTS],
    params:
        code=code("src/arrepro/paper.py", "src/arrepro/tables.py", "src/arrepro/files.py", "scripts/paper_numbers.py"),
        # what the manuscript says about the setup, from the config (arrepro.paper.grid_meta)
        meta={
            "scale": GRID.scale_name,
            "device": GRID.scale.get("device", "auto"),
            "tasks": GRID.scale["tasks"],
            "recipes": GRID.scale["recipes"],
            "experiments": GRID.experiments,
            "lr_grids": config["lr_grids"],
            "reference_lrs": {e: GRID.reference_lrs(e) for e in EXPERIMENTS},
            "metric": config["aggregate"]["metric"],
            "paper_scale": config["scales"].get("paper"),
        },
    log:
        "results/logs/paper_numbers.log",
    conda:
        "../../envs/paper.yaml"
    script:
        "../../scripts/paper_numbers.py"


# pdflatex + bibtex (Debian: texlive-latex-base texlive-latex-recommended texlive-fonts-recommended)
# where no tectonic is on PATH; with --sdm conda, envs/paper.yaml's tectonic (its first run fetches
# the TeX packages it needs). Run from the repository root: main.tex names files from there.
rule paper:
    output:
        "results/paper.pdf",
    input:
        tex="paper/main.tex",
        bib="paper/refs.bib",
        numbers="results/paper/numbers.tex",
        setup="results/paper/setup.tex",
        figures=[f"results/{e}.pdf" for e in FIGURES],
        tables=[f"results/{e}.tex" for e in TABLES],
    params:
        build="results/paper/build",
        latex="-interaction=nonstopmode -halt-on-error -file-line-error",
    log:
        "results/logs/paper.log",
    conda:
        "../../envs/paper.yaml"
    shell:
        """
        rm -rf {params.build:q} && mkdir -p {params.build:q}
        if command -v tectonic >/dev/null 2>&1; then
            tectonic -X compile --keep-logs --outdir {params.build:q} -Z search-path=. {input.tex:q} > {log:q} 2>&1
        elif command -v pdflatex >/dev/null 2>&1; then
            (pdflatex {params.latex} -output-directory {params.build:q} {input.tex:q} \
             && bibtex {params.build:q}/main \
             && pdflatex {params.latex} -output-directory {params.build:q} {input.tex:q} \
             && pdflatex {params.latex} -output-directory {params.build:q} {input.tex:q}) > {log:q} 2>&1 \
             || (tail -n 40 {log:q} >&2; exit 1)
        else
            echo "no TeX engine: install Debian's texlive-latex-base texlive-latex-recommended" \
                 "texlive-fonts-recommended, or run with --sdm conda" | tee {log:q} >&2
            exit 1
        fi
        cp {params.build:q}/main.pdf {output:q}
        """
