/**
 * The per-service ops ports: runtime/ops-server.ts on its own, then the mixin every domain service carries, on real
 * in-process nodes (ports shifted by a free OPS_PORT_OFFSET so no standard port is touched).
 */
import net from "net";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "fs";
import os from "os";
import path from "path";
import type { Server } from "http";
import { DOMAINS } from "../../catalog";
import { startPlatform, type Platform } from "../../platform";
import { ServiceBroker } from "moleculer";
import { bindConfig, readConfig, type PlatformConfig } from "../../runtime/config";
import type { Health } from "../../runtime/health";
import { boundPort, PROMETHEUS_TYPE, startOpsServer, stopOpsServer } from "../../runtime/ops-server";
import { CacheUnavailableError } from "../../runtime/kv";
import { opsPort, opsPortMixin, opsPortsEnabled } from "../../engine/ops-port.mixin";
import { serverAnswers } from "../helpers/platform";
import { freeOpsOffset, freePort } from "../helpers/ports";

const ok: Health = { status: "ok", info: { cache: { status: "up" } } };
const portOf = (name: string) => DOMAINS.find((d) => d.name === name)!.restPort;

/**
 * The TCP ports this process listens on now (every platform of this file runs in it): its socket descriptors
 * (/proc/self/fd) matched against the kernel's tables of listening sockets (/proc/net/tcp, tcp6: state 0A).
 */
function listeningPorts(): number[] {
	const inodes = new Set<string>();
	for (const fd of readdirSync("/proc/self/fd")) {
		try {
			const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
			if (m) inodes.add(m[1]);
		} catch {
			/* closed since the listing */
		}
	}
	const ports: number[] = [];
	for (const table of ["/proc/net/tcp", "/proc/net/tcp6"])
		for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
			// sl, local address:port (hex), remote address, state, queues, timers, retransmits, uid, timeout, inode
			const f = line.trim().split(/\s+/);
			if (f[3] === "0A" && inodes.has(f[9])) ports.push(parseInt(f[1].split(":")[1], 16));
		}
	return ports;
}

async function get(url: string, init?: RequestInit) {
	const res = await fetch(url, init);
	const text = await res.text();
	let body: any = text;
	try {
		body = JSON.parse(text);
	} catch {
		/* metrics text */
	}
	return { status: res.status, headers: res.headers, text, body };
}

describe("runtime/ops-server", () => {
	let server: Server | undefined;
	let base: string;
	let health: () => Promise<Health>;
	let metrics: () => string;

	beforeEach(async () => {
		health = async () => ok;
		metrics = () => "# TYPE x counter\nx 1\n";
		server = await startOpsServer({ host: "127.0.0.1", port: 0, status: () => health(), metrics: () => metrics(), statusTimeoutMs: 100 });
		base = `http://127.0.0.1:${boundPort(server)}`;
	});
	afterEach(async () => {
		await stopOpsServer(server);
	});

	test("GET /status answers 200 with the health body when it is ok (query strings ignored)", async () => {
		const r = await get(`${base}/status?probe=1`);
		expect(r.status).toBe(200);
		expect(r.headers.get("content-type")).toMatch(/^application\/json/);
		expect(r.body).toEqual(ok);
	});

	test("HEAD /status answers the status without a body", async () => {
		const r = await get(`${base}/status`, { method: "HEAD" });
		expect(r.status).toBe(200);
		expect(r.text).toBe("");
	});

	test("an unhealthy body answers 503 with that body", async () => {
		const bad: Health = { status: "error", info: { cache: { status: "down" }, "document store": { status: "up" } } };
		health = async () => bad;
		const r = await get(`${base}/status`);
		expect(r.status).toBe(503);
		expect(r.body).toEqual(bad);
	});

	test("a failing health check answers 503 in the health shape", async () => {
		health = async () => {
			throw new Error("boom");
		};
		const r = await get(`${base}/status`);
		expect(r.status).toBe(503);
		expect(r.body).toEqual({ status: "error", info: { health: { status: "down", message: "health check failed" } } });
	});

	test("a health check slower than the timeout answers 503", async () => {
		health = () => new Promise((resolve) => setTimeout(() => resolve(ok), 1000));
		const t = Date.now();
		const r = await get(`${base}/status`);
		expect(r.status).toBe(503);
		expect(r.body.info.health).toEqual({ status: "down", message: "health check timed out" });
		expect(Date.now() - t).toBeLessThan(900);
	});

	test("GET /metrics answers the Prometheus text", async () => {
		const r = await get(`${base}/metrics`);
		expect(r.status).toBe(200);
		expect(r.headers.get("content-type")).toBe(PROMETHEUS_TYPE);
		expect(r.text).toBe("# TYPE x counter\nx 1\n");
	});

	test("other paths answer 404 and other methods 405, in the platform's error shape", async () => {
		const nf = await get(`${base}/content/notes`);
		expect(nf.status).toBe(404);
		expect(nf.body).toEqual({ statusCode: 404, message: "not found", error: "Not Found" });
		const na = await get(`${base}/status`, { method: "POST", body: "{}" });
		expect(na.status).toBe(405);
		expect(na.headers.get("allow")).toBe("GET, HEAD");
		expect(na.body).toMatchObject({ statusCode: 405, error: "Method Not Allowed" });
	});

	test("a service's extra routes are served beside, never over, /status and /metrics", async () => {
		await stopOpsServer(server);
		const seen: string[] = [];
		server = await startOpsServer({
			host: "127.0.0.1",
			port: 0,
			status: async () => ok,
			metrics: () => "m 1\n",
			extra: async (req, res) => {
				seen.push(req.url!);
				if (req.url === "/hook") {
					res.writeHead(201, { "Content-Type": "application/json" });
					res.end('{"result":"allow"}');
					return true;
				}
				if (req.url === "/broken") throw new Error("hook failed");
				if (req.url === "/cache-down") throw new CacheUnavailableError("Connection is closed.");
				return false;
			},
		});
		base = `http://127.0.0.1:${boundPort(server)}`;
		const hook = await get(`${base}/hook`, { method: "POST", body: "{}" });
		expect([hook.status, hook.body]).toEqual([201, { result: "allow" }]);
		expect((await get(`${base}/status`)).body).toEqual(ok);
		expect((await get(`${base}/metrics`)).text).toBe("m 1\n");
		expect((await get(`${base}/other`)).status).toBe(404);
		const broken = await get(`${base}/broken`);
		expect(broken.status).toBe(500);
		expect(broken.body).toEqual({ statusCode: 500, message: "internal error", error: "Internal Server Error" });
		// A hook whose cache is down: a 503 the calling broker may retry, with Retry-After.
		const down = await get(`${base}/cache-down`);
		expect([down.status, down.headers.get("retry-after"), down.body]).toEqual([503, "2", { statusCode: 503, message: "service unavailable", error: "Service Unavailable" }]);
		expect(seen).toEqual(["/hook", "/other", "/broken", "/cache-down"]);
	});

	test("a port already in use rejects the start", async () => {
		await expect(startOpsServer({ host: "127.0.0.1", port: boundPort(server!), status: health, metrics })).rejects.toMatchObject({ code: "EADDRINUSE" });
	});

	test("stop closes the port at once, even with a keep-alive connection open", async () => {
		const port = boundPort(server!);
		const sock = net.connect(port, "127.0.0.1");
		await new Promise((r) => sock.once("connect", r));
		const t = Date.now();
		await stopOpsServer(server);
		server = undefined;
		expect(Date.now() - t).toBeLessThan(1000);
		expect(await serverAnswers(port)).toBe(false);
		sock.destroy();
	});
});

describe("when the ops ports are on", () => {
	test("automatic: on for a node without the gateway, off with it; SERVICE_PORTS forces either way", () => {
		expect(opsPortsEnabled({ services: undefined })).toBe(false);
		expect(opsPortsEnabled({ services: ["api", "content"] })).toBe(false);
		expect(opsPortsEnabled({ services: ["content"] })).toBe(true);
		expect(opsPortsEnabled({ services: ["content"], servicePorts: false })).toBe(false);
		expect(opsPortsEnabled({ services: undefined, servicePorts: true })).toBe(true);
		expect(opsPortsEnabled({ services: ["api"], servicePorts: true })).toBe(true);
		expect(opsPort(3110, { opsPortOffset: 0 })).toBe(3110);
		expect(opsPort(3110, { opsPortOffset: 25000 })).toBe(28110);
	});
});

describe("readiness", () => {
	test("a node whose other services are still starting answers 503 `starting`; 200 once the whole node has started", async () => {
		const offset = await freeOpsOffset([3110]);
		const broker = new ServiceBroker({ nodeID: "ops-ready", logger: false });
		bindConfig(broker, { ...readConfig(), host: "127.0.0.1", services: ["probe"], servicePorts: true, opsPortOffset: offset });
		let release!: () => void;
		const slowStarted = new Promise<void>((r) => (release = r));
		broker.createService({ name: "probe", mixins: [opsPortMixin(3110)] });
		broker.createService({ name: "slow", started: () => slowStarted });
		const starting = broker.start();
		try {
			const url = `http://127.0.0.1:${3110 + offset}/status`;
			// The probe's own port is up (its `started` ran) while the node is not: the others could not reach it yet.
			let s = { status: 0, body: undefined as unknown };
			for (const end = Date.now() + 5000; s.status !== 503 && Date.now() < end;) s = await get(url).catch(() => s);
			expect(s).toEqual({ ...s, status: 503, body: { status: "error", info: { node: { status: "down", message: "starting" } } } });
			release();
			await starting;
			const r = await get(url);
			expect([r.status, r.body]).toEqual([200, { status: "ok", info: {} }]);
		} finally {
			release();
			await starting.catch(() => undefined);
			await broker.stop();
		}
	});
});

describe("the ops port of every domain service (in-process nodes)", () => {
	let dataDir: string;
	let offset: number;
	let p: Platform | undefined;

	const start = (cfg: Partial<PlatformConfig>) => startPlatform({ port: 0, host: "127.0.0.1", logLevel: "warn", dataDir, opsPortOffset: offset, ...cfg });
	const ops = (name: string) => `http://127.0.0.1:${portOf(name) + offset}`;

	beforeEach(async () => {
		dataDir = mkdtempSync(path.join(os.tmpdir(), "ops-port-test-"));
		offset = await freeOpsOffset();
	});
	afterEach(async () => {
		await p?.stop();
		p = undefined;
		rmSync(dataDir, { recursive: true, force: true });
	});

	test("a domain node without the gateway answers /status and /metrics on each spec port + offset", async () => {
		p = await start({ services: ["content", "logistic"] });
		for (const name of ["content", "logistic"]) {
			const s = await get(`${ops(name)}/status`);
			expect(s.status).toBe(200);
			expect(s.body).toEqual({
				status: "ok",
				// The document store names its kind (the platform's own choice here: PostgreSQL by default).
				info: { "document store": { status: "up", kind: "postgres" }, "event stream": { status: "up" }, cache: { status: "up" } },
			});
		}
		const m = await get(`${ops("content")}/metrics`);
		expect(m.status).toBe(200);
		expect(m.headers.get("content-type")).toBe(PROMETHEUS_TYPE);
		expect(m.text).toMatch(/^# TYPE moleculer_request_total counter$/m);
		// The status probe ran the service's own health action through the broker: it is counted.
		expect(m.text).toMatch(/^moleculer_request_total\{[^}]*action="content\.health"[^}]*\} [1-9]/m);
		// The node's view of the cluster: itself, and one endpoint of each of its services.
		expect(m.text).toMatch(/^moleculer_registry_nodes_online_total_value\{[^}]*\} 1$/m);
		expect(m.text).toMatch(/^moleculer_registry_service_endpoints_total_value\{[^}]*service="content"[^}]*\} 1$/m);
		// Domains this node does not run have no port.
		expect(await serverAnswers(portOf("identity") + offset)).toBe(false);

		await p.stop();
		p = undefined;
		expect(await serverAnswers(portOf("content") + offset)).toBe(false);
		expect(await serverAnswers(portOf("logistic") + offset)).toBe(false);
	});

	test("/status reports 503 with the failing dependency (cache down)", async () => {
		p = await start({ services: ["content"], redisUrl: "redis://127.0.0.1:1" });
		const s = await get(`${ops("content")}/status`);
		expect(s.status).toBe(503);
		expect(s.body).toEqual({
			status: "error",
			info: { "document store": { status: "up", kind: "postgres" }, "event stream": { status: "up" }, cache: { status: "down" } },
		});
	});

	test("the one-process default opens no ops port; SERVICE_PORTS=1 opens one per domain beside the gateway", async () => {
		p = await start({ port: await freePort() });
		expect((await get(`${p.url}/status`)).status).toBe(200);
		for (const d of DOMAINS) expect(await serverAnswers(d.restPort + offset)).toBe(false);
		await p.stop();

		p = await start({ port: await freePort(), servicePorts: true });
		for (const d of DOMAINS) {
			const s = await get(`${ops(d.name)}/status`);
			expect([d.name, s.status]).toEqual([d.name, 200]);
		}
		// Calls between services travel over the transporter: the spec's gRPC ports (kept in the catalog as its data)
		// have no listener, while every ops port does (docs/decisions.md, "No internal gRPC ports").
		const listening = listeningPorts();
		for (const d of DOMAINS)
			expect({ domain: d.name, ops: listening.includes(d.restPort + offset), grpc: listening.includes(d.grpcPort) }).toEqual({ domain: d.name, ops: true, grpc: false });
	});

	test("SERVICE_PORTS=0 keeps a node without the gateway off the ops ports", async () => {
		p = await start({ services: ["content"], servicePorts: false });
		expect(await serverAnswers(portOf("content") + offset)).toBe(false);
	});

	test("a taken ops port fails the start with a message that says what to do", async () => {
		const blocker = net.createServer();
		await new Promise<void>((r) => blocker.listen(portOf("content") + offset, "127.0.0.1", r));
		try {
			// fatal: the broker's own error log of the failed start is expected here.
			await expect(start({ services: ["content"], logLevel: "fatal" })).rejects.toThrow(
				/content: cannot serve \/status and \/metrics on 127\.0\.0\.1:\d+ \(EADDRINUSE\).*OPS_PORT_OFFSET.*SERVICE_PORTS=0/,
			);
		} finally {
			await new Promise((r) => blocker.close(r));
		}
	});
});
