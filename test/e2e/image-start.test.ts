/**
 * The image's start without Docker: the node process as an unprivileged user (nobody) from a root-owned, read-only
 * copy of the app directory (0555, as `COPY . .` leaves /app for `USER node`), started as the Dockerfile's CMD does.
 * With DATA_DIR on a directory of its own it serves /status 200 and writes nothing into the app; without one
 * (DATA_DIR defaults to ./data, inside the read-only app) it stops at once with a one-line message saying what to
 * set, not a stack trace. Needs root to switch users: skips with a message otherwise (fails under REQUIRE_SERVERS=1).
 */
import { execFileSync, spawnSync } from "child_process";
import { chmodSync, chownSync, cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync } from "fs";
import os from "os";
import path from "path";
import { startNode, stopNode, waitForHttp, type AsImage, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";

const ROOT = path.resolve(__dirname, "../..");
const NOBODY = { uid: 65534, gid: 65534 };

/** Why this machine cannot run the test, or undefined. */
function unavailable(): string | undefined {
	if (typeof process.getuid !== "function" || process.getuid() !== 0) return "the test must run as root to start a node as nobody";
	// The copy links this checkout's node_modules: nobody must be able to read it (a checkout under /root is not).
	const probe = spawnSync(process.execPath, ["-e", `require("fs").accessSync(${JSON.stringify(path.join(ROOT, "node_modules/tsx/package.json"))})`], {
		...NOBODY,
		stdio: "ignore",
	});
	return probe.status === 0 ? undefined : `node_modules of ${ROOT} is not readable by uid ${NOBODY.uid}`;
}

const why = unavailable();
if (why && process.env.REQUIRE_SERVERS === "1") throw new Error(`${why} (REQUIRE_SERVERS=1)`);
if (why) console.warn(`SKIPPED: ${why}; the image start tests are reported as skipped`);
const live = why ? test.skip : test;

jest.setTimeout(60_000);

let app = "";
let image: AsImage;
const nodes: ChildNode[] = [];
const dirs: string[] = [];

/** Every file and directory under `dir` (relative), to show that the app directory stayed as it was. */
function listing(dir: string): string[] {
	return readdirSync(dir, { recursive: true, withFileTypes: false }).map(String).sort();
}

/** The repository's files, root-owned and read-only (0555 directories, 0444 files), node_modules linked. */
function readOnlyApp(): string {
	const dir = mkdtempSync(path.join(os.tmpdir(), "image-app-"));
	const files = execFileSync("git", ["ls-files", "-z"], { cwd: ROOT, encoding: "utf8" }).split("\0").filter(Boolean);
	for (const f of files) cpSync(path.join(ROOT, f), path.join(dir, f));
	symlinkSync(path.join(ROOT, "node_modules"), path.join(dir, "node_modules"));
	const seal = (d: string) => {
		for (const e of readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, e.name);
			if (e.isSymbolicLink()) continue;
			if (e.isDirectory()) seal(p);
			else chmodSync(p, 0o444);
		}
		chmodSync(d, 0o555);
	};
	seal(dir);
	return dir;
}

beforeAll(() => {
	if (why) return;
	app = readOnlyApp();
	image = { cwd: app, ...NOBODY };
});

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	for (const d of dirs) rmSync(d, { recursive: true, force: true });
	if (app) {
		// Writable again so that root's removal does not depend on CAP_DAC_OVERRIDE semantics of every filesystem.
		const open = (d: string) => {
			chmodSync(d, 0o755);
			for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory() && !e.isSymbolicLink()) open(path.join(d, e.name));
		};
		open(app);
		rmSync(app, { recursive: true, force: true });
	}
});

live("as nobody in a read-only app with DATA_DIR on a writable directory, /status answers 200", async () => {
	const before = listing(app);
	const data = mkdtempSync(path.join(os.tmpdir(), "image-data-"));
	dirs.push(data);
	chownSync(data, NOBODY.uid, NOBODY.gid);
	const port = await freePort();
	const node = startNode("image", { DATA_DIR: data, PORT: String(port), HOME: "/nonexistent" }, image);
	nodes.push(node);
	const status = await waitForHttp(`http://127.0.0.1:${port}/status`, [node], { timeoutMs: 45_000 });
	expect(status.body.status).toBe("ok");
	// What the node wrote is nobody's and private; the app directory has not changed.
	const boot = statSync(path.join(data, "bootstrap.json"));
	expect([boot.uid, boot.mode & 0o777]).toEqual([NOBODY.uid, 0o600]);
	expect(statSync(data).mode & 0o777).toBe(0o700);
	expect(listing(app)).toEqual(before);
});

live("without a writable DATA_DIR it stops at once with a clear message, not a stack trace", async () => {
	const port = await freePort();
	// DATA_DIR as its default resolves: ./data in the (read-only) app directory.
	const node = startNode("image-no-data", { DATA_DIR: path.join(app, "data"), PORT: String(port), HOME: "/nonexistent" }, image);
	nodes.push(node);
	let timer: NodeJS.Timeout | undefined;
	const code = await Promise.race([node.exited, new Promise((r) => (timer = setTimeout(() => r("still running"), 30_000)))]);
	clearTimeout(timer);
	expect(code).toBe(1);
	const out = node.output().trim();
	expect(out).toBe(
		`cannot start: DATA_DIR ${path.join(app, "data")} cannot be created or written by this user (uid 65534): EACCES. ` +
			"Set DATA_DIR to a directory this user may write (in the image: the volume at /data), or give this user that directory",
	);
	expect(out).not.toMatch(/^\s+at /m);
});

live("an existing DATA_DIR that is not the user's is refused the same way", async () => {
	const data = mkdtempSync(path.join(os.tmpdir(), "image-theirs-"));
	dirs.push(data);
	chmodSync(data, 0o755); // readable and searchable by nobody, not writable
	mkdirSync(path.join(data, "content"));
	const node = startNode("image-theirs", { DATA_DIR: data, PORT: String(await freePort()), HOME: "/nonexistent" }, image);
	nodes.push(node);
	expect(await node.exited).toBe(1);
	expect(node.output()).toContain(`cannot start: DATA_DIR ${data} cannot be created or written by this user (uid 65534): EACCES.`);
	expect(node.output()).not.toMatch(/^\s+at /m);
});
