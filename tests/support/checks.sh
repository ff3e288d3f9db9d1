# The verdicts of a shell test (sourced): one line per check and the counts at the end, the same in
# every script that counts its checks.
#   ok MSG / bad MSG   one check passed / failed ("ok   MSG", "FAIL MSG")
#   checks_group MSG   for scripts that only say what failed (`[ ... ] || bad "..."`): the checks
#                      from here to the next checks_group (or checks_finish) are one, "ok   MSG" when
#                      none of them failed
#   checks_finish      prints "P passed, F failed"; its status is the test's (0 only when none failed)
#   checks_say LINE    where ok and bad write their line: stdout; a script may define its own after
#                      sourcing this (scripts/gpu-check.sh: a time stamp and a summary file)
#   rel_diff A B [TOL] max |a - b| / max |b| over two equally long lists of numbers (one number each is
#                      a list), |a - b| when b is all zero: the measure of tests/support/rel_diff.h.
#                      Prints it (%.3e); with TOL, its status is 0 only when it is <= TOL. Lists of
#                      different lengths, empty or not numbers: status 2 and a message on stderr.
passes=0; fails=0
checks_say() { echo "$*"; }
ok() { checks_say "ok   $*"; passes=$((passes+1)); }
bad() { checks_say "FAIL $*"; fails=$((fails+1)); }
checks_group_msg=""; checks_group_fails=0
checks_group() {
  if [ -n "$checks_group_msg" ] && [ "$fails" = "$checks_group_fails" ]; then ok "$checks_group_msg"; fi
  checks_group_msg=$*; checks_group_fails=$fails
}
checks_finish() {
  checks_group ""
  echo "$passes passed, $fails failed"
  [ "$fails" = 0 ]
}
rel_diff() {
  awk -v a="$1" -v b="$2" -v tol="${3:-}" 'BEGIN {
    n = split(a, x); m = split(b, y); num = 0; den = 0
    if (n == 0 || n != m) { printf "rel_diff: %d and %d numbers\n", n, m > "/dev/stderr"; exit 2 }
    for (i = 1; i <= n; i++) {
      if (x[i] !~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ ||
          y[i] !~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/) {
        printf "rel_diff: not a number: %s or %s\n", x[i], y[i] > "/dev/stderr"; exit 2 }
      d = x[i] - y[i]; if (d < 0) d = -d; if (d > num) num = d
      v = y[i] + 0; if (v < 0) v = -v; if (v > den) den = v
    }
    r = den > 0 ? num / den : num
    printf "%.3e\n", r
    exit (tol != "" && !(r <= tol + 0))
  }'
}
