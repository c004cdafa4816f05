/**
 * `npm test` (after the lint): the whole suite in two jest passes on a 2-core machine.
 *
 * 1. Every file but the solo ones, two files at a time.
 * 2. The solo files, one at a time: those that start a cluster of node processes of their own and kill, stop or
 *    silence them (failover, outages, SIGKILL under load), and those that time the platform's event loop under a
 *    storm (the liveness bound of /status). Beside another file they share the two cores with a dozen processes,
 *    and what they measure (a node's failover in seconds, /status held under 100 ms of CPU) is then the machine's
 *    load, not the platform: two at a time, failover beside write-kill's load saw its restarted replica take 60 s
 *    to start (docs/decisions.md, "How `npm test` runs on two cores").
 *
 * A file is solo when it holds a line `// jest-solo: <why>`. Both passes always run; the exit status is the first
 * failing pass's. SOLO_NODE_BIN (a directory holding `node`) runs the solo pass on that Node. Arguments
 * (`npm test -- test/unit`) run jest once with them instead, as a plain `jest` would.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const JEST = path.join(ROOT, "node_modules", "jest", "bin", "jest.js");
const SOLO = /^\/\/ jest-solo: \S/m;

/** Every test file under test/, relative to the root, sorted. */
function testFiles(dir = path.join(ROOT, "test")) {
	const out = [];
	for (const name of readdirSync(dir).sort()) {
		const file = path.join(dir, name);
		if (statSync(file).isDirectory()) out.push(...testFiles(file));
		else if (name.endsWith(".test.ts")) out.push(path.relative(ROOT, file));
	}
	return out;
}

/** Runs jest on this process's Node, or on the `node` of `bin` (a directory) with it first on PATH for what jest spawns. */
function jest(args, bin) {
	const node = bin ? path.join(bin, "node") : process.execPath;
	const env = bin ? { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH ?? ""}` } : process.env;
	const r = spawnSync(node, [JEST, ...args], { cwd: ROOT, stdio: "inherit", env });
	return r.status ?? 1;
}

const extra = process.argv.slice(2);
if (extra.length) process.exit(jest(["--maxWorkers=2", ...extra]));

const files = testFiles();
const solo = files.filter((f) => SOLO.test(readFileSync(path.join(ROOT, f), "utf8")));
const shared = files.filter((f) => !solo.includes(f));
console.log(`npm test: ${shared.length} files two at a time, then ${solo.length} solo files one at a time`);
const first = jest(["--maxWorkers=2", "--runTestsByPath", ...shared]);
// SOLO_NODE_BIN: the solo files on another Node than the shared pass (.ci/run: the shared pass on Node 24, which runs
// it with a third less CPU; the solo files, whose liveness bounds were set on Node 20 and gain nothing on 24, on the
// machine's Node 20: docs/decisions.md, "Node versions").
const second = jest(["--maxWorkers=1", "--runTestsByPath", ...solo], process.env.SOLO_NODE_BIN || undefined);
process.exit(first || second);
