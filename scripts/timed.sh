#!/usr/bin/env bash
# Where a long make target's time went: each phase is run through this script, which appends its
# name, seconds and exit status to a log; the target ends by printing the log as one table, whether
# the phases passed or not.
#   timed.sh LOG NAME CMD...     run CMD as phase NAME; exits with CMD's status
#   timed.sh LOG --start         begin a new log (an earlier one is removed)
#   timed.sh LOG --summary TITLE print the phases and the wall time since --start (a phase run in the
#                                background, e.g. "venv(background)", overlaps the others)
set -uo pipefail
log=$1; shift
case "${1:-}" in
  --start)
    mkdir -p "$(dirname "$log")" && echo "#start $(date +%s)" > "$log"
    ;;
  --summary)
    title=${2:-phases}
    [ -s "$log" ] || { echo "$title: no phase ran"; exit 0; }
    awk -v title="$title" -v now="$(date +%s)" '
      $1 == "#start" { start = $2; next }
      { n++; name[n] = $1; secs[n] = $2; rc[n] = $3; if (length($1) > w) w = length($1) }
      END {
        if (w < 5) w = 5
        printf "\n== %s: where the time went\n", title
        for (i = 1; i <= n; i++)
          printf "  %-*s %6d s%s\n", w, name[i], secs[i], rc[i] == 0 ? "" : "   (failed: exit " rc[i] ")"
        if (start) { total = now - start; printf "  %-*s %6d s (%d min %d s)\n", w, "total", total, int(total / 60), total % 60 }
      }' "$log"
    ;;
  *)
    name=$1; shift
    start=$(date +%s)
    "$@"
    rc=$?
    echo "$name $(( $(date +%s) - start )) $rc" >> "$log"
    exit $rc
    ;;
esac
