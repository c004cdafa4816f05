/**
 * A gateway node (SERVICES=api) over NATS beside a domain node, stopped with SIGTERM while it holds live cursors
 * (clients that reconnect as a browser's `EventSource` does) and keep-alive traffic (reads and creates without pause):
 * it exits within a few seconds, once the requests it was serving are answered; each live stream gets a closing frame
 * (`retry:`) and ends, so its client reconnects elsewhere by itself. Skips with a message when NATS, Redis or
 * PostgreSQL is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import http from "http";
import { readFileSync } from "fs";
import path from "path";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, clusterSettings, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { sleep } from "../helpers/wait";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);
jest.setTimeout(240_000);

/** From SIGTERM to the process's exit. */
const EXIT_BOUND_MS = 4000;

let db: TestDatabase | undefined;
let deployment: ReturnType<typeof testDeployment>;
const nodes: Record<string, ChildNode> = {};
let port: number;
let token: string;

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) return;
	deployment = testDeployment();
	const shared = { ...clusterSettings(deployment, db.url), EVENT_STREAM: "nats" };
	port = await freePort();
	nodes.domain = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS, OPS_PORT_OFFSET: String(await freeOpsOffset()) });
	nodes.gateway = startNode("gateway", { ...shared, SERVICES: "api", PORT: String(port), LOG_LEVEL: "info" });
	await waitForHttp(`http://127.0.0.1:${port}/status`, Object.values(nodes), { timeoutMs: 150_000 });
	const root = JSON.parse(readFileSync(path.join(nodes.domain.dataDir, "bootstrap.json"), "utf8"));
	const login = await client(`http://127.0.0.1:${port}`)("POST", "/auth/token", {
		body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password },
	});
	token = login.body.data.access_token;
}, 200_000);

afterAll(async () => {
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	if (deployment) await dropNatsStreams(deployment.namespace).catch(() => undefined);
	if (deployment) await dropRedisPrefix("redis://127.0.0.1:6379", deployment.redisPrefix).catch(() => undefined);
	await db?.drop();
});

/**
 * A live cursor read as `EventSource` reads it: after the stream ends (or the connection fails) it connects again
 * after the last `retry:` it was given (3 s before any, as browsers do), with `Last-Event-ID`, until `close()`.
 */
function eventSource(url: string, headers: Record<string, string>) {
	const streams: Array<{ status: number; text: string; endedAt?: number }> = [];
	let retryMs = 3000;
	let lastId: string | undefined;
	let closed = false;
	let current: http.ClientRequest | undefined;
	const once = () =>
		new Promise<void>((resolve) => {
			const s: { status: number; text: string; endedAt?: number } = { status: 0, text: "" };
			streams.push(s);
			const req = http.get(url, { headers: { accept: "text/event-stream", ...headers, ...(lastId ? { "last-event-id": lastId } : {}) }, agent: false }, (res) => {
				s.status = res.statusCode ?? 0;
				res.setEncoding("utf8");
				res.on("data", (chunk: string) => {
					s.text += chunk;
					for (const m of chunk.matchAll(/^retry: (\d+)$/gm)) retryMs = Number(m[1]);
					for (const m of chunk.matchAll(/^id: (\S+)$/gm)) lastId = m[1];
				});
				res.on("close", () => {
					s.endedAt = Date.now();
					resolve();
				});
			});
			req.on("error", () => {
				s.endedAt ??= Date.now();
				resolve();
			});
			current = req;
		});
	const loop = (async () => {
		while (!closed) {
			await once();
			if (!closed) await sleep(retryMs);
		}
	})();
	return {
		streams,
		get retryMs() {
			return retryMs;
		},
		async close() {
			closed = true;
			current?.destroy();
			await loop;
		},
	};
}

interface Outcome {
	start: number;
	ms: number;
	status: number | string;
}

servers.test(
	"SIGTERM to a gateway with live cursors and keep-alive traffic: it exits within a few seconds, every request it took answered, every live stream closed with a frame that makes its client reconnect",
	async () => {
		const base = `http://127.0.0.1:${port}`;
		const gw = client(base);
		const sources = [1, 2, 3].map(() => eventSource(`${base}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` }));
		const late: Array<ReturnType<typeof eventSource>> = [];
		const outcomes: Outcome[] = [];
		let stop = false;
		// Keep-alive clients (fetch reuses its connections): reads and creates without pause.
		const worker = async (i: number) => {
			for (let n = 0; !stop; n++) {
				const start = Date.now();
				const r = await (i % 2 ? gw("GET", "/content/notes", { token }) : gw("POST", "/content/notes", { token, body: { title: `stop-${i}-${n}` } })).then(
					(x) => x.status,
					(e) => String((e as { cause?: { code?: string } }).cause?.code ?? e),
				);
				outcomes.push({ start, ms: Date.now() - start, status: r });
				if (typeof r !== "number") await sleep(100);
			}
		};
		const load = Promise.all([0, 1, 2, 3].map(worker));
		const gateway = nodes.gateway;
		let exitMs = -1;
		let code: number | null | "still running" = null;
		let t0 = 0;
		try {
			await sleep(2000);
			expect(sources.map((s) => s.streams[0]?.status)).toEqual([200, 200, 200]);
			t0 = Date.now();
			process.kill(gateway.pid, "SIGTERM");
			// Clients that (re)connect while the gateway stops, before its listener closes.
			late.push(...[1, 2].map(() => eventSource(`${base}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` })));
			code = await Promise.race([gateway.exited, sleep(20_000).then(() => "still running" as const)]);
			exitMs = Date.now() - t0;
		} finally {
			stop = true;
			await load;
			await Promise.all([...sources, ...late].map((s) => s.close()));
		}
		const before = outcomes.filter((o) => o.start < t0);
		const after = outcomes.filter((o) => o.start >= t0);
		const lateFirst = late.map((s) => s.streams[0]);
		console.log(
			`gateway SIGTERM: exited with ${code} after ${exitMs} ms; ${outcomes.length} requests (${before.length} before the signal, after it: ` +
				`${JSON.stringify(Object.fromEntries([...new Set(after.map((o) => o.status))].map((st) => [st, after.filter((o) => o.status === st).length])))}); ` +
				`streams opened during the stop: ${JSON.stringify(lateFirst.map((x) => x.status))}`,
		);
		expect([code, exitMs < EXIT_BOUND_MS]).toEqual([0, true]);
		// Every request sent before the signal was answered; none sent after it waited (answered, or its connection refused).
		expect(before.filter((o) => o.status !== 200)).toEqual([]);
		expect(outcomes.filter((o) => o.ms >= EXIT_BOUND_MS)).toEqual([]);
		// Each live stream open at the signal ended with the closing frame, which sets the client's reconnection delay.
		for (const s of sources) expect(s.streams[0].text.endsWith(": this gateway is stopping; reconnect\nretry: 1000\n\n")).toBe(true);
		expect(sources.map((s) => s.retryMs)).toEqual([1000, 1000, 1000]);
		// A stream opened during the stop is refused with its connection (0) or closed at once, unlisted, with the frame.
		for (const x of lateFirst) expect(x.status === 0 || x.text === ": this gateway is stopping; reconnect\nretry: 1000\n\n").toBe(true);
	},
);
