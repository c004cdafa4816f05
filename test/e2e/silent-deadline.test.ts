/**
 * A PostgreSQL that stops answering, under a whole platform (in this process, documents on PostgreSQL): no request
 * waits longer than its statements' deadline (REQUEST_DB_DEADLINE_MS, 2 s here), each answers 503 `service
 * unavailable` with Retry-After, and `/status` answers within 1 s naming the document and relational stores `down`
 * with their reason. Two ways to go silent:
 * - the server (127.0.0.1:5432) reached through a proxy that holds every byte, open and new connections alike
 *   (test/helpers/silent-proxy.ts);
 * - the embedded PostgreSQL frozen with SIGSTOP: the server this test's platform started (its pid from
 *   DATA_DIR/postgres/postmaster.pid) and the processes it started (its sessions: stopping the server alone leaves
 *   open connections answering), SIGCONT at the end.
 * The server-side limits stay at their defaults (statement 30 s, answer 35 s): what bounds a request here is its
 * deadline. Once PostgreSQL answers again, the platform serves again.
 */
import { readdirSync, readFileSync } from "fs";
import path from "path";
import { bootPlatform, needServers, type HttpResult, type TestPlatform } from "../helpers/platform";
import { serverDatabase } from "../helpers/pg-server-db";
import { testDatabase } from "../helpers/pg";
import { silentProxy, type SilentProxy } from "../helpers/silent-proxy";
import { sleep } from "../helpers/wait";

jest.setTimeout(180_000);

const DEADLINE_MS = 2000;
/** What a request may take beyond its deadline: the way back to the client, on a loaded 2-core machine. */
const MARGIN_MS = 1200;
/** /status, whatever hangs. */
const STATUS_BOUND_MS = 1000;
/** From the end of the silence until every kind of request answers 200 again. */
const RECOVERY_BOUND_MS = 60_000;

/**
 * The platform logs at `fatal` only: each request that fails logs an error, and a line through jest's console costs
 * tens of milliseconds here (a stack and a code frame), which would count in the answers' times.
 */
const QUIET = { logLevel: "fatal" };

const UNAVAILABLE = { statusCode: 503, message: "service unavailable", error: "Service Unavailable" };

interface Timed {
	what: string;
	ms: number;
	status: number;
	body: unknown;
	retryAfter: string | null;
}

/** `fn`'s answer and how long it took; no answer within 40 s counts as status 0. */
async function timed(what: string, fn: () => Promise<HttpResult>): Promise<Timed> {
	const t0 = Date.now();
	const r = await Promise.race([fn().catch(() => undefined), sleep(40_000).then(() => undefined)]);
	return { what, ms: Date.now() - t0, status: r?.status ?? 0, body: r?.body, retryAfter: r?.headers.get("retry-after") ?? null };
}

/** The requests of a client: login, list, count, get, create, patch, remove. */
function requests(p: TestPlatform, token: string, id: string): Array<[string, () => Promise<HttpResult>]> {
	const r = p.root;
	return [
		["login", () => p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: r.client_id, username: r.username, password: r.password } })],
		["list", () => p.http("GET", "/content/notes", { token })],
		["count", () => p.http("GET", "/content/notes/count", { token })],
		["get", () => p.http("GET", `/content/notes/${id}`, { token })],
		["create", () => p.http("POST", "/content/notes", { token, body: { title: "during the silence" } })],
		["patch", () => p.http("PATCH", `/content/notes/${id}`, { token, body: { title: "changed during the silence" } })],
		["remove", () => p.http("DELETE", `/content/notes/${id}`, { token })],
	];
}

/** Every request, all at once: each answers 503 with Retry-After within its deadline. */
async function expectBounded(p: TestPlatform, token: string, id: string, round: string): Promise<Timed[]> {
	const answers = await Promise.all(requests(p, token, id).map(([what, fn]) => timed(`${round} ${what}`, fn)));
	expect(answers.map((a) => ({ what: a.what, status: a.status, body: a.body, retryAfter: a.retryAfter, inTime: a.ms < DEADLINE_MS + MARGIN_MS || a.ms }))).toEqual(
		answers.map((a) => ({ what: a.what, status: 503, body: UNAVAILABLE, retryAfter: "2", inTime: true })),
	);
	return answers;
}

/**
 * GET /status, timed: within the bound, 503, the stores named down with their reason (each store's check had no answer
 * within its 500 ms), and every service that is down says why.
 */
async function expectStatusNamesStores(p: TestPlatform): Promise<number> {
	const s = await timed("/status", () => p.http("GET", "/status"));
	const info = (s.body as { info?: Record<string, { status: string; kind?: string; message?: string }> })?.info ?? {};
	// The embedded stream's outbox is in PostgreSQL too (EVENT_STREAM=outbox).
	expect({
		status: s.status,
		inTime: s.ms < STATUS_BOUND_MS || s.ms,
		document: info["document store"],
		relational: info["relational store"],
		stream: info["event stream"],
	}).toEqual({
		status: 503,
		inTime: true,
		document: { status: "down", kind: "postgres", message: "no answer within 500 ms" },
		relational: { status: "down", message: "no answer within 500 ms" },
		stream: { status: "down", message: "no answer within 500 ms" },
	});
	const silentServices = Object.entries(info).filter(([k, v]) => k.startsWith("service:") && v.status === "down" && !v.message);
	expect(silentServices).toEqual([]);
	return s.ms;
}

/** Until login, list, create and patch all answer 200 again; the milliseconds that took. */
async function expectServing(p: TestPlatform, id: string): Promise<number> {
	const t0 = Date.now();
	for (;;) {
		const token = await p.rootToken().catch(() => undefined);
		const all = token
			? await Promise.all(
					requests(p, token, id)
						.slice(1, 6)
						.map(([, fn]) =>
							fn().then(
								(r) => r.status,
								() => 0,
							),
						),
				)
			: [0];
		if (all.every((s) => s === 200)) return Date.now() - t0;
		if (Date.now() - t0 > RECOVERY_BOUND_MS) throw new Error(`not serving ${RECOVERY_BOUND_MS} ms after the silence: ${all}`);
		await sleep(500);
	}
}

/**
 * The scenario: a note to address, then the silence; two rounds of every request (the second after the first has
 * left its connections behind), /status during both; then the end of the silence and the platform serving again.
 */
async function silentScenario(p: TestPlatform, silence: () => void, speak: () => void, label: string): Promise<void> {
	const token = await p.rootToken();
	const created = await p.http("POST", "/content/notes", { token, body: { title: "before the silence" } });
	expect(created.status).toBe(200);
	const id = created.body.data.id as string;
	silence();
	const t0 = Date.now();
	let recovered = 0;
	const statusMs: number[] = [];
	let rounds: Timed[][] = [];
	try {
		const first = expectBounded(p, token, id, "first");
		await sleep(300);
		statusMs.push(await expectStatusNamesStores(p));
		rounds.push(await first);
		const second = expectBounded(p, token, id, "second");
		statusMs.push(await expectStatusNamesStores(p));
		rounds.push(await second);
		statusMs.push(await expectStatusNamesStores(p));
	} finally {
		speak();
	}
	const silentMs = Date.now() - t0;
	recovered = await expectServing(p, id);
	rounds = rounds.map((r) => r.sort((a, b) => b.ms - a.ms));
	console.log(
		`${label}: silent ${silentMs} ms; slowest answers ${rounds
			.map((r) =>
				r
					.slice(0, 3)
					.map((a) => `${a.what} ${a.ms} ms`)
					.join(", "),
			)
			.join("; ")}; ` + `/status ${statusMs.join(", ")} ms; serving again ${recovered} ms after`,
	);
}

const servers = needServers(["PostgreSQL", 5432]);

servers.describe("PostgreSQL server behind a proxy that holds every byte", () => {
	let proxy: SilentProxy;
	let p: TestPlatform | undefined;
	let drop: (() => Promise<void>) | undefined;

	beforeAll(async () => {
		proxy = await silentProxy(5432);
		const db = (await serverDatabase()) ?? (await testDatabase())!;
		drop = () => db.drop();
		const url = new URL("tcpUrl" in db ? db.tcpUrl : db.url);
		url.host = proxy.address;
		p = await bootPlatform({ databaseUrl: url.toString(), databasePoolSize: 10, requestDbDeadlineMs: DEADLINE_MS, ...QUIET });
	}, 120_000);

	afterAll(async () => {
		proxy?.restore();
		await p?.cleanup();
		await proxy?.close();
		await drop?.().catch(() => undefined);
	});

	test("no request waits longer than its deadline, /status answers within 1 s naming the stores, and the platform serves again", () =>
		silentScenario(
			p!,
			() => proxy.silence(),
			() => proxy.restore(),
			"PostgreSQL server silent",
		));
});

describe("embedded PostgreSQL frozen (SIGSTOP)", () => {
	let p: TestPlatform | undefined;
	let frozen: number[] = [];

	beforeAll(async () => {
		p = await bootPlatform({ databaseUrl: undefined, requestDbDeadlineMs: DEADLINE_MS, ...QUIET });
	}, 120_000);

	afterAll(async () => {
		thaw();
		await p?.cleanup();
	});

	/**
	 * The embedded server (first line of postmaster.pid) and the processes it started: its sessions and background
	 * processes (each in a process group of its own, so they are found by their parent).
	 */
	function serverProcesses(): number[] {
		const pid = Number(readFileSync(path.join(p!.dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0]);
		const children = readdirSync("/proc")
			.filter((d) => /^\d+$/.test(d))
			.filter((d) => {
				try {
					const stat = readFileSync(`/proc/${d}/stat`, "utf8");
					return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid;
				} catch {
					return false;
				}
			})
			.map(Number);
		return [pid, ...children];
	}

	function freeze(): void {
		// The server first: it starts no new session while its sessions are being stopped.
		for (const pid of serverProcesses()) {
			process.kill(pid, "SIGSTOP");
			frozen.push(pid);
		}
	}

	function thaw(): void {
		for (const pid of frozen.reverse()) process.kill(pid, "SIGCONT");
		frozen = [];
	}

	test("no request waits longer than its deadline, /status answers within 1 s naming the stores, and the platform serves again", () =>
		silentScenario(p!, freeze, thaw, "embedded PostgreSQL frozen"));
});
