#!/usr/bin/env bash
# The GPU measurements of docs/performance.md in one command, on a machine with a CUDA device.
#
#   bench/gpu_session.sh STEP...
#
# Steps, run in the order given, each under its own time limit (seconds, after a colon):
#   suite[:560]                 the GPU tests (pytest -m gpu over the files that hold them); on an
#                               H100 they took about 650 s on 2026-12-06, past one command's 600 s,
#                               so they come in two halves too:
#   suite-gates[:560]           the gates' own (GPU_GATE_TESTS: 440 s then)
#   suite-rest[:300]            the hand-over, streaming and containment (GPU_REST_TESTS: 212 s then)
#   suites[:560]                both halves side by side, each with the step's limit (on an H100 on
#                               2026-12-07: 324 s and 410 s, 418 s in all: one command)
#   bench:MANIFEST[:290]        bench/bench_corpus.py --all over the pairs of MANIFEST
#                               (a pairs.jsonl, or a few of its lines: bench/corpus/README.md)
#   audit:MANIFEST[:300]        kanalyze audit --device cuda --jobs JOBS over MANIFEST, resuming
#                               the journal in $AUDIT (default: audit-NAME beside MANIFEST, for
#                               MANIFEST NAME.jsonl, so that the same manifest resumes its own);
#                               no pair starts in the last PAIR_TIMEOUT + 10 s (--stop-after), so the pairs
#                               running at the limit are written, not lost; PAIR_TIMEOUT=SECONDS
#                               (default 240) is each pair's limit, JOBS=N (default 4) the pairs at once;
#                               a journal folder with no journal yet starts from SEED (default the
#                               repository's journal of those gates: bench/corpus/gpu-journal/results.jsonl,
#                               with AUDIT_GATES=targeted gpu-journal-targeted/; SEED= for none);
#                               AUDIT_GATES=all|targeted|CODES (default all) the gates each pair runs;
#                               AUDIT_OPTIONS="--no-spares ..." more of the audit's options (a second
#                               audit step with another AUDIT and --no-spares times the spares side by side)
#   pair:MANIFEST[:300]         bench/gpu_pair.py over MANIFEST's pairs, one at a time in one process,
#                               each step of the session said as it happens (GATES=CMP001,... default CMP001):
#                               for a pair the audit reported oddly (a worker that ended, a job unanswered)
#   replay:AUDIT_DIR[:120]      bench/replay_witnesses.py over the witnesses the audit in AUDIT_DIR wrote
#                               on this machine: does each confirmation's witness show its claim?
#                               (REPLAY_JOBS=N replay processes at once, one a pair, default 4; REPLAY_TIMEOUT=SECONDS a witness,
#                               default 150: a confirmation for a case that did not finish in 120 s needs more)
#
# Everything a step prints also goes to $OUT/<step>.log (default ./gpu-out); the bench's
# numbers to $OUT/bench.json and an audit's journal to $OUT/JOURNAL.jsonl, its summary to
# $OUT/JOURNAL.log (JOURNAL: the journal folder's name).  WHEELS=DIR
# installs the core dependencies from wheels first (a machine with no package index) into
# a folder of their own, put on PYTHONPATH beside this checkout.
set -uo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/kanalyze-site "$WHEELS"/*.whl || exit 9
    export PYTHONPATH=/tmp/kanalyze-site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
# The gates' own tests first: where the step's limit cuts the list, it cuts the rest.
GPU_GATE_TESTS=(tests/test_dynamic_gpu_determinism.py tests/test_dynamic_gpu.py tests/test_dynamic_gpu_bounds.py)
GPU_REST_TESTS=(tests/test_streaming.py tests/test_held_arrays.py tests/test_delivery.py tests/test_device_share.py
                tests/test_containment.py)

for step in "$@"; do
    IFS=: read -r name manifest seconds <<< "$step"
    case $name in suite*) seconds=${manifest:-560} ;; esac
    case $name in
    suites)
        # (the wheels, where WHEELS named them, are installed already: PYTHONPATH carries them)
        OUT=$OUT WHEELS= bash "$self" "suite-gates:$seconds" > "$OUT/suites-gates.txt" 2>&1 &
        OUT=$OUT WHEELS= bash "$self" "suite-rest:$seconds" > "$OUT/suites-rest.txt" 2>&1 &
        wait
        tail -20 "$OUT/suites-gates.txt"; tail -20 "$OUT/suites-rest.txt" ;;
    suite|suite-gates|suite-rest)
        case $name in
        suite) tests=("${GPU_GATE_TESTS[@]}" "${GPU_REST_TESTS[@]}") ;;
        suite-gates) tests=("${GPU_GATE_TESTS[@]}") ;;
        *) tests=("${GPU_REST_TESTS[@]}") ;;
        esac
        # SIGINT at the limit: pytest then still prints what failed so far, and its summary.
        timeout -s INT -k 30 "$seconds" python3 -m pytest -m gpu -q -rs --durations=12 "${tests[@]}" 2>&1 |
            tee "$OUT/$name.log" | tail -40 ;;
    bench)
        timeout "${seconds:-290}" python3 bench/bench_corpus.py --corpus "$manifest" --device cuda --all \
            --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    audit)
        journal=${AUDIT:-$(dirname "$manifest")/audit-$(basename "$manifest" .jsonl)}
        mkdir -p "$journal"
        # (a record's id includes its gates: a journal of other gates would only be carried along)
        case ${AUDIT_GATES:-all} in
        all) seed=${SEED-bench/corpus/gpu-journal/results.jsonl} ;;
        targeted) seed=${SEED-bench/corpus/gpu-journal-targeted/results.jsonl} ;;
        *) seed=${SEED-} ;;
        esac
        if [ ! -s "$journal/results.jsonl" ] && [ -n "$seed" ] && [ -s "$seed" ]; then
            cp "$seed" "$journal/results.jsonl" && echo "resuming the journal of $seed"
        fi
        # No pair starts in its last PAIR_TIMEOUT + 10 s: the running ones end and are written before the limit.
        limit=${seconds:-300} pair=${PAIR_TIMEOUT:-240}
        timeout "$limit" python3 -m kanalyze audit --manifest "$manifest" --output "$journal" \
            --device cuda --gates "${AUDIT_GATES:-all}" --jobs "${JOBS:-4}" --pair-timeout "$pair" --stop-after $(( limit > pair + 60 ? limit - pair - 10 : 50 )) -q \
            ${AUDIT_OPTIONS:-} > "$OUT/$(basename "$journal").log" 2>&1
        cp "$journal/results.jsonl" "$OUT/$(basename "$journal").jsonl" 2>/dev/null
        tail -30 "$OUT/$(basename "$journal").log" ;;
    replay)   # MANIFEST here is an audit's folder (its journal and witnesses)
        timeout "${seconds:-120}" python3 bench/replay_witnesses.py "$manifest" --device cuda \
            --timeout "${REPLAY_TIMEOUT:-150}" --jobs "${REPLAY_JOBS:-4}" \
            --json "$OUT/replay.json" 2>&1 | tee "$OUT/replay.log" | tail -30 ;;
    pair)
        timeout "${seconds:-300}" python3 bench/gpu_pair.py "$manifest" --gates "${GATES:-CMP001}" 2>&1 |
            tee "$OUT/pair.log" | tail -80 ;;
    *)
        echo "unknown step: $step" >&2; exit 2 ;;
    esac
done
