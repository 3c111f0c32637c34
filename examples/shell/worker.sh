#!/bin/sh
# A Norn worker in shell, run once per task by `norn work`:
#
#   go run ./cmd/norn work -q shell-demo -c 2 -- ./examples/shell/worker.sh
#   go run ./cmd/norn submit shell-demo '{"words": 3}'
#
# The spec arrives on stdin; NORN_TASK_ID, NORN_QUEUE, NORN_LEASE and
# NORN_ATTEMPT are in the environment. "progress: x" lines on stderr report
# progress. stdout is the result. Exit 0 completes, 75 retries later, any
# other code aborts with the end of stderr as the reason.
set -eu

spec=$(cat)
# Pull "words": N out of the spec without needing jq.
words=$(printf '%s' "$spec" | sed -n 's/.*"words"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p')
if [ -z "$words" ]; then
	echo "spec must look like {\"words\": 3}, got: $spec" >&2
	exit 2 # a bad spec never gets better: abort
fi
if [ "$words" -gt 100 ]; then
	echo "too many words for now; try again later" >&2
	exit 75 # temporary failure: retried per the task's retry policy
fi

out=""
i=1
while [ "$i" -le "$words" ]; do
	sleep 0.2
	out="$out word$i"
	echo "progress: $(awk "BEGIN { print $i / $words }")" >&2
	i=$((i + 1))
done
# Text on stdout becomes a JSON string result; JSON would be kept as is.
printf '{"task":"%s","attempt":%s,"text":"%s"}\n' "$NORN_TASK_ID" "$NORN_ATTEMPT" "${out# }"
