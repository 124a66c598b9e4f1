from arrepro.report.paper import grid_meta as paper_meta  # noqa: E402

# Stage 5: the manuscript, results/{scale}/paper.pdf. Its prose is paper/main.tex; every number in it is a
# macro that paper_numbers computes from the experiments' tables, and it includes every figure
# (results/{scale}/EXP.pdf) and table (results/{scale}/EXP.tex) that the scale declares (the Snakefile's FIGURES
# and TABLES, from GRID.experiments), and the Mamba blocks' figure where the scale trains them (BLOCK_FIGURE).


# The paper scale's models as their cells build them (first weights, weight decay, dropout, norms)
# beside the sources' rules (arrepro.report.fidelity_built): the appendix's second fidelity table,
# whatever the scale of the document. Torch builds the models: the train env.
PAPER_MODELS = sorted({m for e in config.get("scales", {}).get("paper", {}).get("experiments", {}).values()
                       for g in e["grids"] for m in g["models"]})


rule fidelity_built:
    output:
        f"{OUT}/paper/fidelity_built.tex",
    params:
        code=script_code("scripts/fidelity_built.py",
                         *sorted({f for mixer in {config["models"][m]["mixer"] for m in PAPER_MODELS}
                                  for f in train_sources(mixer, ROOT)})),  # each mixer once (40 models, 10 mixers)
        config=json.dumps({"models": config["models"], "scales": {"paper": config.get("scales", {}).get("paper")}},
                          sort_keys=True),
    log:
        f"{OUT}/logs/fidelity_built.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../../scripts/fidelity_built.py"


rule paper_numbers:
    output:
        numbers=f"{OUT}/paper/numbers.tex",
        setup=f"{OUT}/paper/setup.tex",
        # the claims table's rows as files beside the PDF: to read, diff between runs, load in pandas
        claims_md=f"{OUT}/claims.md",
        claims_csv=f"{OUT}/claims.csv",
    input:
        best=expand(rules.aggregate.output.best, exp=EXPERIMENTS),
        cells=expand(rules.aggregate.output.cells, exp=EXPERIMENTS),
        # read for its \R{key}s: one that numbers.tex cannot define fails here, naming the key
        tex="paper/main.tex",
    params:
        code=script_code("scripts/paper_numbers.py"),
        # what the manuscript says about the setup, from the config
        meta=paper_meta(GRID, config),
    log:
        f"{OUT}/logs/paper_numbers.log",
    conda:
        "../../envs/paper.yaml"
    script:
        "../../scripts/paper_numbers.py"


# pdflatex + bibtex (Debian: texlive-latex-base texlive-latex-recommended texlive-fonts-recommended)
# where no tectonic is on PATH; with --sdm conda, envs/paper.yaml's tectonic (its first run fetches
# the TeX packages it needs). main.tex names its inputs results/EXP.pdf, results/paper/numbers.tex
# and paper/refs: it is built inside results/{scale}/paper/build, where `results` links to this
# scale's outputs (results/{scale}: ../.., which the build folder is in wherever `results` really
# is) and `paper` to the repository's paper/ by its absolute path (a relative one would resolve
# from where the build folder really is: inside the target of a `results` link to another disk).
PAPER_COMMAND = """
    log=$(pwd)/{log:q}
    rm -rf {params.build:q} && mkdir -p {params.build:q}
    ln -s ../.. {params.build:q}/results && ln -s "$(pwd -P)/paper" {params.build:q}/paper
    cd {params.build:q}
    if command -v tectonic >/dev/null 2>&1; then
        tectonic -X compile --keep-logs --outdir . -Z search-path=. paper/main.tex > "$log" 2>&1
    elif command -v pdflatex >/dev/null 2>&1; then
        (pdflatex {params.latex} paper/main.tex && bibtex main \
         && pdflatex {params.latex} paper/main.tex && pdflatex {params.latex} paper/main.tex) > "$log" 2>&1 \
         || (tail -n 40 "$log" >&2; exit 1)
    else
        echo "no TeX engine: install Debian's texlive-latex-base texlive-latex-recommended" \
             "texlive-fonts-recommended, or run with --sdm conda" | tee "$log" >&2
        exit 1
    fi
    cd - > /dev/null
    cp {params.build:q}/main.pdf {output:q}
    """


rule paper:
    output:
        f"{OUT}/paper.pdf",
    input:
        tex="paper/main.tex",
        bib="paper/refs.bib",
        numbers=f"{OUT}/paper/numbers.tex",
        setup=f"{OUT}/paper/setup.tex",
        fidelity=f"{OUT}/paper/fidelity_built.tex",
        figures=[f"{OUT}/{e}.pdf" for e in FIGURES] + BLOCK_FIGURE[:1],
        tables=[f"{OUT}/{e}.tex" for e in TABLES],
    params:
        build=f"{OUT}/paper/build",
        latex="-interaction=nonstopmode -halt-on-error -file-line-error",
        command=command_param(PAPER_COMMAND),
    log:
        f"{OUT}/logs/paper.log",
    conda:
        "../../envs/paper.yaml"
    shell:
        PAPER_COMMAND
