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
 * failing pass's. Arguments (`npm test -- test/unit`) run jest once with them instead, as a plain `jest` would.
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

function jest(args) {
	const r = spawnSync(process.execPath, [JEST, ...args], { cwd: ROOT, stdio: "inherit" });
	return r.status ?? 1;
}

const extra = process.argv.slice(2);
if (extra.length) process.exit(jest(["--maxWorkers=2", ...extra]));

const files = testFiles();
const solo = files.filter((f) => SOLO.test(readFileSync(path.join(ROOT, f), "utf8")));
const shared = files.filter((f) => !solo.includes(f));
console.log(`npm test: ${shared.length} files two at a time, then ${solo.length} solo files one at a time`);
const first = jest(["--maxWorkers=2", "--runTestsByPath", ...shared]);
const second = jest(["--maxWorkers=1", "--runTestsByPath", ...solo]);
process.exit(first || second);
