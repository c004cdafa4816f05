/** Boots a whole platform in-process on a fresh DATA_DIR and a free port, with HTTP helpers for tests. */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { startPlatform, type Platform } from "../../platform";
import { pgTemplate, seedEmbeddedPg } from "./pg-template";
import { serverDatabase, TEST_POOL_SIZE } from "./pg-server-db";
import type { PlatformConfig } from "../../runtime/config";
import { createStore, isDuplicateKeyError } from "../../stores";

export interface HttpResult<T = any> {
	status: number;
	body: T;
	headers: Headers;
	text: string;
}

export interface TestPlatform extends Platform {
	url: string;
	dataDir: string;
	root: { client_id: string; client_secret: string; domain: string; user_id: string; username: string; password: string };
	http<T = any>(method: string, p: string, opts?: HttpOptions): Promise<HttpResult<T>>;
	/** A root access token (password grant). */
	rootToken(): Promise<string>;
	/** Stops and starts again on the same DATA_DIR (restart persistence). */
	restart(): Promise<void>;
	cleanup(): Promise<void>;
}

export interface HttpOptions {
	token?: string;
	body?: unknown;
	/** A body sent as is (malformed JSON, oversized bodies). */
	raw?: string;
	headers?: Record<string, string>;
}

/** A small HTTP client for a base URL: JSON in, parsed JSON (or text: SSE, HTML, metrics) out. */
export function client(base: string) {
	return async function http<T = any>(method: string, pth: string, opts: HttpOptions = {}): Promise<HttpResult<T>> {
		const headers: Record<string, string> = { ...(opts.headers ?? {}) };
		if (opts.token) headers.authorization = `Bearer ${opts.token}`;
		let body: string | undefined = opts.raw;
		if (opts.body !== undefined) {
			body = JSON.stringify(opts.body);
			headers["content-type"] = "application/json";
		}
		if (opts.raw !== undefined) headers["content-type"] ??= "application/json";
		const res = await fetch(base + pth, { method, headers, body });
		const text = await res.text();
		let parsed: any = text;
		try {
			parsed = JSON.parse(text);
		} catch {
			/* not JSON */
		}
		return { status: res.status, body: parsed, headers: res.headers, text };
	};
}

export function tempDir(prefix = "platform-test-"): string {
	return mkdtempSync(path.join(os.tmpdir(), prefix));
}

/**
 * A DATA_DIR for a second node of the same deployment in this process (a directory is held by one platform): new, with
 * the deployment's keys (DATA_DIR/keys.json) copied from `dataDir`, as nodes share JWT_SECRET and AES_SECRET.
 */
export function siblingDataDir(dataDir: string): string {
	const dir = tempDir();
	copyFileSync(path.join(dataDir, "keys.json"), path.join(dir, "keys.json"));
	return dir;
}

const HOLD = { id: "test-hold", seq: 0 };
/** The mark dataDirHoldingOutbox leaves in a DATA_DIR for bootPlatform (a file no platform reads). */
const HOLD_FILE = "test-outbox-hold";

/**
 * A DATA_DIR where a consumer group that is down has stored its position at the start: the outbox keeps every event
 * until every group has passed it (docs/contracts.md "Limits the platform keeps"), so a test can read all of its events.
 * bootPlatform stores the position once the database is up, before the test's first request.
 */
export function dataDirHoldingOutbox(dir = tempDir()): string {
	writeFileSync(path.join(dir, HOLD_FILE), JSON.stringify(HOLD) + "\n");
	return dir;
}

async function holdOnPostgres(cfg: PlatformConfig): Promise<void> {
	const offsets = createStore(cfg, "_stream_offsets");
	await offsets.connect();
	try {
		// A restart on the same DATA_DIR finds it there already.
		await offsets.insert({ ...HOLD }).catch((err) => {
			if (!isDuplicateKeyError(err)) throw err;
		});
	} finally {
		await offsets.disconnect();
	}
}

export async function bootPlatform(overrides: Partial<PlatformConfig> = {}): Promise<TestPlatform> {
	const dataDir = overrides.dataDir ?? tempDir();
	// Tests send email as @example.com (TOUCH_EMAIL_SENDERS); a tenant's own domains are always allowed.
	// The cleaner's schedule (every 10 minutes) never fires in a test on its own: a pass at a 10-minute mark would take
	// what a test's own `cleaner.run` is about to count. Tests of the schedule give theirs.
	const cfg: Partial<PlatformConfig> = { port: 0, host: "127.0.0.1", logLevel: "warn", dataDir, touchEmailSenders: ["example.com"], cleanerCron: "0 0 1 1 *", ...overrides };
	// A new DATA_DIR of ours gets a database of its own on the local PostgreSQL server (test/helpers/pg-server-db.ts),
	// or else the initialised embedded cluster (test/helpers/pg-template.ts); a caller's DATA_DIR or database is left as given.
	const own = !overrides.dataDir && !("databaseUrl" in overrides) ? await serverDatabase() : undefined;
	// The embedded server's pool size: three test files at a time share the server's 100 connections.
	if (own) Object.assign(cfg, { databaseUrl: own.url, databasePoolSize: TEST_POOL_SIZE });
	else if (!overrides.dataDir && (await pgTemplate())) seedEmbeddedPg(dataDir, overrides.databaseUrl ?? process.env.DATABASE_URL);
	let p = await startPlatform(cfg);
	if (existsSync(path.join(dataDir, HOLD_FILE))) await holdOnPostgres(p.cfg);
	const root = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const tp: TestPlatform = {
		...p,
		url: p.url!,
		dataDir,
		root,
		http: (method, pth, opts) => client(tp.url)(method, pth, opts),
		async rootToken() {
			const r = await tp.http("POST", "/auth/token", {
				body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password },
			});
			if (r.status !== 200) throw new Error(`root login failed: ${r.status} ${r.text}`);
			return r.body.data.access_token as string;
		},
		async restart() {
			await p.stop();
			p = await startPlatform({ ...cfg, port: Number(new URL(tp.url).port) });
			tp.broker = p.broker;
			tp.cfg = p.cfg;
			tp.stop = p.stop;
		},
		async cleanup() {
			await p.stop();
			await own?.drop();
			rmSync(dataDir, { recursive: true, force: true });
		},
	};
	return tp;
}

/** Reads an SSE body into frames `{ event?, id?, data }`. */
export function parseSse(text: string): Array<{ event?: string; id?: string; data: string }> {
	return text
		.split("\n\n")
		.filter((f) => f.trim() && !f.startsWith(":"))
		.map((f) => {
			const frame: { event?: string; id?: string; data: string } = { data: "" };
			for (const line of f.split("\n")) {
				const i = line.indexOf(": ");
				const k = line.slice(0, i);
				const v = line.slice(i + 2);
				if (k === "event") frame.event = v;
				else if (k === "id") frame.id = v;
				else if (k === "data") frame.data = v;
			}
			return frame;
		});
}

/** `v` as JSON with every object's keys sorted (JSON.stringify's, otherwise). */
function sortedJson(v: unknown): string {
	return JSON.stringify(v, (_k, x) =>
		x && typeof x === "object" && !Array.isArray(x)
			? Object.fromEntries(
					Object.keys(x)
						.sort()
						.map((k) => [k, (x as Record<string, unknown>)[k]]),
				)
			: x,
	);
}

/**
 * SSE text with the JSON of each `data:` line written with its keys sorted, every other byte as it is: two streams
 * compare frame for frame with their documents compared as documents (a stored document comes back in jsonb's key
 * order, not the order it was written in: docs/decisions.md, "Documents stored once as jsonb").
 */
export function sseKeysSorted(text: string): string {
	return text.replace(/^data: (.*)$/gm, (line, json: string) => {
		try {
			return `data: ${sortedJson(JSON.parse(json))}`;
		} catch {
			return line;
		}
	});
}

/** True when a TCP server answers on 127.0.0.1:port. Tests that need it skip (or fail under REQUIRE_SERVERS=1). */
export async function serverAnswers(port: number, timeoutMs = 5000): Promise<boolean> {
	const net = await import("net");
	return new Promise((resolve) => {
		const s = net.connect({ host: "127.0.0.1", port });
		const done = (ok: boolean) => {
			s.destroy();
			resolve(ok);
		};
		s.setTimeout(timeoutMs, () => done(false));
		s.once("connect", () => done(true));
		s.once("error", () => done(false));
	});
}

/**
 * For suites that need a real server: returns true when it answers; otherwise prints a visible skip message,
 * or throws when REQUIRE_SERVERS=1 (CI) so that a missing server fails instead of silently skipping.
 */
export async function requireServer(name: string, port: number): Promise<boolean> {
	if (await serverAnswers(port)) return true;
	const msg = `${name} is not answering on 127.0.0.1:${port}`;
	if (process.env.REQUIRE_SERVERS === "1") throw new Error(`${msg} (REQUIRE_SERVERS=1)`);
	console.warn(`SKIPPED: ${msg}; its tests are skipped`);
	return false;
}

const probed = new Map<number, boolean>();

/**
 * True when a TCP server answers on 127.0.0.1:port, decided synchronously (a short-lived child process connects), so
 * that a test file can choose at load time between `test` and `test.skip`: jest then reports the tests as skipped.
 */
export function serverAnswersSync(port: number, timeoutMs = 3000): boolean {
	const known = probed.get(port);
	if (known !== undefined) return known;
	const { spawnSync } = require("child_process") as typeof import("child_process");
	const probe = `const s=require("net").connect({host:"127.0.0.1",port:${Number(port)}});s.setTimeout(${timeoutMs},()=>process.exit(1));s.on("connect",()=>process.exit(0));s.on("error",()=>process.exit(1));`;
	// A server that is down refuses at once; only a probe that did not finish (a loaded machine: starting node itself
	// took seconds) is tried again, so a busy CI machine is not mistaken for a missing server.
	let status: number | null = null;
	for (let i = 0; i < 3 && status === null; i++) status = spawnSync(process.execPath, ["-e", probe], { timeout: timeoutMs + 15_000, stdio: "ignore" }).status;
	const up = status === 0;
	probed.set(port, up);
	return up;
}

/**
 * The servers a test file needs, checked when the file loads: `test`/`describe` are jest's own when every one
 * answers, else `test.skip`/`describe.skip` (reported as skipped, with the reason printed once). Under
 * REQUIRE_SERVERS=1 a server that does not answer fails the file instead.
 */
export function needServers(...servers: Array<[name: string, port: number]>): { up: boolean; test: jest.It; describe: jest.Describe } {
	const down = servers.filter(([, port]) => !serverAnswersSync(port));
	if (down.length) {
		const msg = down.map(([name, port]) => `${name} is not answering on 127.0.0.1:${port}`).join("; ");
		if (process.env.REQUIRE_SERVERS === "1") throw new Error(`${msg} (REQUIRE_SERVERS=1)`);
		console.warn(`SKIPPED: ${msg}; its tests are reported as skipped`);
		return { up: false, test: test.skip, describe: describe.skip };
	}
	return { up: true, test, describe };
}
