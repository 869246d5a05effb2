#!/usr/bin/env bash
# Reruns every committed figure that depends on the embedded models' weights or tokens (after a
# retrained model ships, or a change that docs/changes.md marks as changing tokens), in the order
# of benchmarks/README.md, from a clean worktree of HEAD so each JSON records a clean commit.
# Outputs go to $OUT (default /tmp/rerun-out), laid out as benchmarks/; copy them over when done
# (`cp -r $OUT/. benchmarks/`, and `$OUT/steps.json` to src/jacobigen/weights/steps.json: the step
# table of the new weights), then `python docs/gen_results.py`. Each step prints its wall time;
# the whole run takes several hours of both cores: run nothing else beside it.
#
#   bash benchmarks/rerun_embedded.sh                 # everything
#   bash benchmarks/rerun_embedded.sh tree quality    # only the named steps
set -euo pipefail

REPO=$(git rev-parse --show-toplevel)
WT=${WT:-/tmp/rerun-wt}
OUT=${OUT:-/tmp/rerun-out}
STEPS=("$@")
[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ] && {
    echo "commit first: the figures must name a clean commit" >&2
    exit 1
}
[ -d "$WT" ] || git -C "$REPO" worktree add --detach "$WT" HEAD
cd "$WT"
export PYTHONPATH="$WT/src"
mkdir -p "$OUT"

wanted() { [ ${#STEPS[@]} -eq 0 ] || [[ " ${STEPS[*]} " == *" $1 "* ]]; }
step() {
    local name=$1
    shift
    wanted "$name" || return 0
    echo "== $name: $*"
    local t0=$SECONDS
    "$@"
    echo "== $name: $((SECONDS - t0)) s"
}

ALL=sjd,scd-mc,scd-gs,sjd-pac,sjd-vp,scd-gs+pac,scd-mc+vp,scd-mc+pac+vp,pjd,pjd+scd-mc,pjd+scd-mc+pac,gsd,lantern,lantern+vp
TREE="scd-mc,scd-gs,sjd-pac,sjd-pac[tree_min_gain=0],sjd-pac[tree_budget=full],sjd-pac[tree_depth=4,tree_budget=full,window=113]"

step names jacobigen bench --model emoji-names --methods ar,scd-mc,scd-gs,sjd-pac --window 16,32,64 --prompts 8 --seeds 2 --threads 1,2 --out "$OUT/names"
step steps jacobigen bench --model emoji --dtype float32 --steps "$OUT/steps.json" --prompts 8 --seeds 2 --threads 1 --out "$OUT/steps-bench"
step steps-t05 jacobigen bench --model emoji --dtype float32 --steps "$OUT/steps.json" --prompts 8 --seeds 2 --threads 1 --temperature 0.5 --top-k 50 --out "$OUT/steps-bench-t05"
for n in 1 2; do
    step embedded jacobigen bench --model emoji --dtype float32 --methods "$ALL" --window 8,16,32,auto --prompts 2 --threads $n --out "$OUT/embedded/threads-$n"
    step tree jacobigen bench --model emoji --dtype float32 --methods "$TREE" --window 16,32,64 --prompts 4 --seeds 4 --threads $n --out "$OUT/tree/threads-$n"
    step auto jacobigen bench --model emoji --dtype float32 --methods auto,scd-gs,scd-mc,sjd-pac --window 8,16,32 --prompts 2 --threads $n --out "$OUT/auto/threads-$n"
done
step tree-compression python benchmarks/tree_compression.py --model emoji --dtype float32 --out "$OUT/tree/compression.md"
step analyze jacobigen analyze --model emoji --dtype float32 --out "$OUT/analyze"
step compiled jacobigen bench --model emoji --dtype float32 --methods sjd,scd-mc,scd-gs,sjd-pac --window 16,32 --prompts 2 --threads 1 --compile --out "$OUT/compiled"
step quality jacobigen bench --model emoji --dtype float32 --methods sjd,scd-mc,sjd-pac,pjd,gsd,lantern,lantern+vp --window 16 --prompts 2 --threads 1 --fid 48 --out "$OUT/quality"
step throughput jacobigen throughput --model emoji --dtype float32 --methods ar,scd-mc,sjd-pac --batch 1,4,16 --images 16 --window 16 --threads 1 --out "$OUT/throughput"
step lossy python benchmarks/lossy.py --model emoji --dtype float32 --prompts 4 --fid 16 --out "$OUT/lossy"
step default-vs-ar python benchmarks/auto/default_vs_ar.py --threads 1,2 --runs 5 --out "$OUT/auto"
step lean-step jacobigen throughput --model emoji --dtype float32 --methods ar --modes shared --batch 1,4,16 --images 16 --window 16 --threads 1 --out "$OUT/lean-step"
step compiled-cpu jacobigen bench --model emoji --dtype float32 --compile --methods sjd,scd-mc --window 32 --prompts 3 --threads 1 --out "$OUT/compiled-cpu"
for n in 1 2; do
    step dtype python benchmarks/dtype/measure.py --models emoji-names,emoji --images 8 --rounds 9 --threads $n --out "$OUT/dtype/threads-$n.json"
done
step video jacobigen bench --model emoji-video --dtype float32 --methods scd-gs,scd-mc,copy+scd-gs --window 16,32,64,128 --prompts 4 --threads 1 --out "$OUT/video-emoji/still-top-p"
step video jacobigen bench --model emoji-video --dtype float32 --methods scd-gs,scd-mc,copy+scd-gs --window 32,64,128 --prompts 2 --top-k 200 --top-p 1 --threads 1 --out "$OUT/video-emoji/still"
step presets python benchmarks/quality/presets_grid.py --model emoji --dtype float32 --prompt "grinning face" --window 16 --seed 0 --temperature 0.5 --top-k 50 --out "$OUT/quality/presets-grinning-face.png"
SAME=sjd,sjd+invariant,scd-mc,scd-mc+invariant,scd-gs,scd-gs+invariant,sjd-pac,scd-mc+pac+invariant,sjd-vp,sjd+vp+invariant,scd-gs+pac,scd-gs+pac+invariant,scd-mc+pac+vp,scd-mc+pac+vp+invariant
step same-as-ar jacobigen bench --model emoji --dtype float32 --methods "$SAME" --window 16,32,64 --prompts 8 --seeds 2 --threads 1 --out "$OUT/same-as-ar/emoji"
step same-as-ar jacobigen bench --model emoji-names --methods scd-mc,scd-mc+invariant,scd-gs,scd-gs+invariant,sjd-pac,scd-mc+pac+invariant,scd-gs+pac,scd-gs+pac+invariant --window 16,32,64 --prompts 4 --seeds 2 --threads 1 --out "$OUT/same-as-ar/names"
step same-as-ar jacobigen bench --model emoji-names-video --methods scd-gs,scd-gs+invariant,scd-gs+copy,scd-gs+copy+invariant --window 16,32,64 --prompts 1 --threads 1 --out "$OUT/same-as-ar/video-names"
step same-as-ar python benchmarks/same-as-ar/equality.py --out "$OUT/same-as-ar/equality.json"
step same-as-ar python benchmarks/quality/presets_grid.py --model emoji --dtype float32 --prompt "red heart" --window 16 --seed 2 --presets ar,sjd,scd-mc,scd-gs,sjd-pac,sjd-vp --both --out "$OUT/same-as-ar/presets-red-heart.png"
echo "done: outputs in $OUT; copy them into benchmarks/ and run python docs/gen_results.py"
