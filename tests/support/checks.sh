# The verdicts of a shell test (sourced): one line per check and the counts at the end, the same in
# every script that counts its checks.
#   ok MSG / bad MSG   one check passed / failed ("ok   MSG", "FAIL MSG")
#   checks_finish      prints "P passed, F failed"; its status is the test's (0 only when none failed)
passes=0; fails=0
ok() { echo "ok   $1"; passes=$((passes+1)); }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
checks_finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" = 0 ]
}
