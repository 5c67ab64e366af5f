# Sourced by the bench scripts that read criterion's results (benches/check.sh,
# benches/check_ab.sh), so that they read the same statistic from the same place.

# criterion_median GROUP FUNCTION: criterion's median estimate (ns) of FUNCTION/memory in
# GROUP, from the last run's target/criterion/GROUP/FUNCTION/memory/new/estimates.json.
criterion_median() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
    "target/criterion/$1/$2/memory/new/estimates.json"
}
