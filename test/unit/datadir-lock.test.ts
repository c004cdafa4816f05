/**
 * The DATA_DIR lock (runtime/datadir-lock.ts): one holder per directory, a refusal that names it and writes nothing,
 * given back at release (an in-process restart takes it again), taken over from a killed holder, also by exactly one
 * of several processes starting together; a path too long for a socket keeps its socket under the temporary
 * directory, recorded in DATA_DIR; a copy of a held directory is not held; nodes without an embedded store take no lock.
 */
import { execFileSync, spawn, type ChildProcess } from "child_process";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { DataDirInUse, lockDataDir, RECORD_FILE, SOCKET_FILE, type DataDirLock } from "../../runtime/datadir-lock";

jest.setTimeout(60_000);

const LOCK_MODULE = path.resolve(__dirname, "../../runtime/datadir-lock.ts");
let root: string;
const children: ChildProcess[] = [];
const locks: DataDirLock[] = [];

beforeAll(() => {
	root = mkdtempSync(path.join(os.tmpdir(), "datadir-lock-unit-"));
	// What a child runs: take the lock, say so ("held" or the refusal), then stay until killed.
	writeFileSync(
		path.join(root, "hold.ts"),
		`import { lockDataDir } from ${JSON.stringify(LOCK_MODULE)};
lockDataDir({ dataDir: process.argv[2] }).then(() => console.log("held"), (e) => console.log(e.message));
setInterval(() => undefined, 1000);
`,
	);
});
afterAll(async () => {
	for (const c of children) c.kill("SIGKILL");
	for (const l of locks) await l.release();
	rmSync(root, { recursive: true, force: true });
});

const take = async (dataDir: string) => {
	const l = await lockDataDir({ dataDir });
	locks.push(l!);
	return l!;
};

/** A process holding (or refused) `dataDir`; resolves with its first line. */
function child(dataDir: string): Promise<{ proc: ChildProcess; line: string }> {
	const proc = spawn(process.execPath, ["--import", "tsx", path.join(root, "hold.ts"), dataDir], { stdio: ["ignore", "pipe", "inherit"] });
	children.push(proc);
	return new Promise((resolve, reject) => {
		let out = "";
		proc.stdout!.on("data", (c) => {
			out += c;
			if (out.includes("\n")) resolve({ proc, line: out.split("\n")[0] });
		});
		proc.once("exit", (code) => reject(new Error(`child exited ${code}: ${out}`)));
	});
}

const killed = (proc: ChildProcess) =>
	new Promise<void>((resolve) => {
		proc.once("exit", () => resolve());
		proc.kill("SIGKILL");
	});

const listing = (d: string) => (readdirSync(d, { recursive: true }) as string[]).sort().map((f) => `${f} ${statSync(path.join(d, f)).mtimeMs}`);

test("one holder: a second attempt is refused with its pid and writes nothing; release gives it back", async () => {
	const dir = path.join(root, "one");
	const first = await take(dir);
	expect(first.socket).toBe(path.join(dir, SOCKET_FILE));
	expect(lstatSync(first.socket).isSocket()).toBe(true);
	expect(JSON.parse(readFileSync(path.join(dir, RECORD_FILE), "utf8"))).toEqual({ pid: process.pid, socket: first.socket });
	expect(statSync(path.join(dir, RECORD_FILE)).mode & 0o777).toBe(0o600);
	const before = listing(dir);
	const refused = await lockDataDir({ dataDir: dir }).catch((e) => e);
	expect(refused).toBeInstanceOf(DataDirInUse);
	expect(refused.message).toBe(`DATA_DIR ${dir} is in use by pid ${process.pid}`);
	expect(listing(dir)).toEqual(before);

	await first.release();
	expect(readdirSync(dir)).toEqual([]);
	// An in-process restart: stop, then start again on the same DATA_DIR.
	const again = await take(dir);
	await again.release();
});

test("a holder in another process is named; once it is killed, its stale socket is taken over", async () => {
	const dir = path.join(root, "other");
	const { proc, line } = await child(dir);
	expect(line).toBe("held");
	const refused = await lockDataDir({ dataDir: dir }).catch((e) => e);
	expect(refused.message).toBe(`DATA_DIR ${dir} is in use by pid ${proc.pid}`);
	await killed(proc);
	// SIGKILL: the socket file and the record stay behind, nobody listens.
	expect(lstatSync(path.join(dir, SOCKET_FILE)).isSocket()).toBe(true);
	const mine = await take(dir);
	expect(JSON.parse(readFileSync(path.join(dir, RECORD_FILE), "utf8")).pid).toBe(process.pid);
	await mine.release();
});

test("processes starting together on a stale socket: exactly one holds, the others name it", async () => {
	const dir = path.join(root, "race");
	const { proc } = await child(dir);
	await killed(proc);
	const results = await Promise.all([0, 1, 2, 3].map(() => child(dir)));
	const holders = results.filter((r) => r.line === "held");
	expect(holders).toHaveLength(1);
	for (const r of results.filter((x) => x !== holders[0])) expect(r.line).toBe(`DATA_DIR ${dir} is in use by pid ${holders[0].proc.pid}`);
	for (const r of results) await killed(r.proc);
});

test("a DATA_DIR whose socket path would be too long keeps it under the temporary directory, recorded in DATA_DIR", async () => {
	const dir = path.join(root, "x".repeat(60), "y".repeat(60));
	mkdirSync(dir, { recursive: true });
	const l = await take(dir);
	expect(path.dirname(path.dirname(l.socket))).toBe(os.tmpdir());
	expect(lstatSync(l.socket).isSocket()).toBe(true);
	expect(existsSync(path.join(dir, SOCKET_FILE))).toBe(false);
	expect(JSON.parse(readFileSync(path.join(dir, RECORD_FILE), "utf8"))).toEqual({ pid: process.pid, socket: l.socket });
	const { line } = await child(dir);
	expect(line).toBe(`DATA_DIR ${dir} is in use by pid ${process.pid}`);
	await l.release();
	expect(existsSync(l.socket)).toBe(false);
	expect(readdirSync(dir)).toEqual([]);
});

test("a copy of a held DATA_DIR (its record, its socket file) is not held", async () => {
	const dir = path.join(root, "original");
	const copy = path.join(root, "copy");
	const held = await take(dir);
	execFileSync("cp", ["-a", dir, copy]);
	expect(JSON.parse(readFileSync(path.join(copy, RECORD_FILE), "utf8")).socket).toBe(held.socket);
	const mine = await take(copy);
	expect(mine.socket).toBe(path.join(copy, SOCKET_FILE));
	await mine.release();
	await held.release();
});

test("no lock where the node keeps no store in DATA_DIR (documents and relational store on a DATABASE_URL)", async () => {
	const dir = mkdtempSync(path.join(root, "shared-"));
	const cfg = { dataDir: dir, databaseUrl: "postgres://db/platform" };
	expect(await lockDataDir(cfg)).toBeUndefined();
	expect(await lockDataDir(cfg)).toBeUndefined();
	expect(readdirSync(dir)).toEqual([]);
	// No DATABASE_URL (the embedded PostgreSQL): locked.
	for (const other of [{ ...cfg, databaseUrl: undefined }]) {
		const l = await lockDataDir(other);
		expect(l).toBeDefined();
		await l!.release();
	}
});
