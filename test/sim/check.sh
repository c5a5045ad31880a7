#!/bin/bash
# `make check` for the proof simulation: the policy under SCHEDULES random
# schedules and every scripted scenario (none may be unsafe; without faults
# every guard passes within its bound), then each mutant, which must be
# caught: by random schedules (at most MUTANT_SCHEDULES) or by the
# scenario that shows its flaw.  One "ok"/"not ok" line per part and a
# closing "N passed, N failed"; exit status 1 if any part failed.
#
#   check.sh BUILD SCHEDULES MUTANT_SCHEDULES JOBS
set -uo pipefail

build=${1:?usage: check.sh BUILD SCHEDULES MUTANT_SCHEDULES JOBS}
schedules=${2:?}
mutant_schedules=${3:?}
jobs=${4:?}
scenarios="issue47 race expired noauth"

passed=0
failed=0
result()
{
	if [ "$1" = ok ]; then
		passed=$((passed + 1))
		echo "ok - $2"
	else
		failed=$((failed + 1))
		echo "not ok - $2"
	fi
}

# The policy: random schedules, then the scenarios.
out=$("$build/zksim" --schedules "$schedules" --jobs "$jobs")
status=$?
echo "$out" | sed -n '1,3p' | sed 's/^/# /'
if [ $status -eq 0 ]; then
	result ok "policy: $schedules random schedules, none unsafe, every guard without faults in time"
else
	# the first failing schedule, replayed with its trace
	echo "$out" | sed -n '4,$p'
	result fail "policy: $schedules random schedules (replay: $build/zksim --seed S --schedules 1 --trace)"
fi
for sc in $scenarios; do
	out=$("$build/zksim" --scenario "$sc")
	if [ $? -eq 0 ]; then
		result ok "policy: scenario $sc is safe"
	else
		echo "$out" | sed -n '4,$p'
		result fail "policy: scenario $sc is UNSAFE (replay: $build/zksim --scenario $sc --trace)"
	fi
done

# Mutants caught by random schedules.
for m in m16 mbound mnobound mping; do
	out=$("$build/zksim-$m" --schedules "$mutant_schedules" --jobs "$jobs" --expect-unsafe)
	if [ $? -eq 0 ]; then
		result ok "$(echo "$out" | grep '^mutant')"
	else
		result fail "mutant $m survived $mutant_schedules random schedules"
	fi
done

# Mutants caught by the scenario that shows their flaw.
for pair in m16:issue47 mexpired:expired mnoauth:noauth; do
	m=${pair%%:*}
	sc=${pair#*:}
	out=$("$build/zksim-$m" --scenario "$sc")
	if [ $? -ne 0 ] && echo "$out" | grep -q 'UNSAFE'; then
		result ok "mutant $m killed by scenario $sc: $(echo "$out" | grep -m1 -o 'UNSAFE.*')"
	else
		result fail "mutant $m survived scenario $sc"
	fi
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
