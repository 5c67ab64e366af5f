# Sourced by the bench scripts that read criterion's results (benches/check.sh,
# benches/check_ab.sh), so that they read the same statistic from the same place.

# Where criterion writes and these scripts read: CRITERION_HOME if set, else cargo's target
# directory's `criterion` (scripts/target-dir.sh: CARGO_TARGET_DIR or a config's target-dir
# included). Exported, so that a bench binary run by hand (check_ab.sh) writes there too.
CRITERION_HOME=${CRITERION_HOME:-$(scripts/target-dir.sh)/criterion}
# Absolute: `cargo bench` runs the bench in its package's directory (benches/), not here.
case $CRITERION_HOME in
  /*) ;;
  *) CRITERION_HOME=$PWD/$CRITERION_HOME ;;
esac
export CRITERION_HOME

# criterion_median GROUP FUNCTION: criterion's median estimate (ns) of FUNCTION/memory in
# GROUP, from the last run's $CRITERION_HOME/GROUP/FUNCTION/memory/new/estimates.json.
criterion_median() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
    "$CRITERION_HOME/$1/$2/memory/new/estimates.json"
}
