"""`kanalyze audit`: one contract-grade audit of a whole corpus of candidate/problem pairs.

Read in this order:

    pairs.py      where the pairs come from: a manifest (pairs.jsonl), a KernelBench
                  run directory, or a folder of candidates against one `--reference`;
                  each pair gets a stable id (its contents and the verdict-changing options)
    journal.py    the results journal, DIR/results.jsonl: one line per pair, appended,
                  flushed and fsynced as each pair ends; a torn last line is dropped
    pair.py       one pair's run, in a child process of its own: the static pass, the
                  gates, and KernelBench's own allclose criterion (allclose.py)
    allclose.py   KernelBench's criterion, run as a fresh process: five seeded trials
                  of `torch.allclose(ref, out, atol=1e-2, rtol=1e-2)`
    executor.py   the local executor: a pair in, a result line out; each pair in a child
                  process with a time limit, `--jobs` of them at once
    ray_executor.py  ... the same as Ray tasks on a cluster (`--executor ray`), files
                  shipped by content, each task running the local executor's child
    summary.py    the numbers a corpus audit reports, from the journal alone;
                  summary_text.py prints them as a table in 100 columns
    html.py       the HTML report, DIR/report.html: one self-contained page from the journal
                  and the summary; html_pairs.py its pairs table, svg.py its chart,
                  sample.py its seeded hand-audit sample, report.css and report.js inlined
    run.py        the audit itself: pairs → skip the finished → executor → journal → summary
    arguments.py  the command line of `kanalyze audit` (added to kanalyze/cli.py's parser)
    command.py    `kanalyze audit`: arguments → pairs → audit → progress line, summary, report

Only the parent writes the journal; a child that crashes, hangs or is killed still
gets its own line (with the reason), and the audit goes on.  Only command.py prints.
"""
