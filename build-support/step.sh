#!/bin/sh
# One set-up step, quietly: a line saying what it does (none for an empty LABEL: a later part of the same
# step), and the command's own output into a log that is printed only if the command fails.
# Usage: sh build-support/step.sh LABEL COMMAND [ARG...]   (the log: $SETUP_LOG, else .delta_optimize/setup.log)
label=$1
shift
log=${SETUP_LOG:-.delta_optimize/setup.log}
mkdir -p "$(dirname "$log")"
[ -n "$label" ] && echo "setup: $label"
"$@" >"$log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    echo "setup failed (exit $status): $*; the output above is in $log" >&2
fi
exit "$status"
