/**
 * Platform nodes as child processes (`node --import tsx start.ts`, as `npm start` and the image run them, with their
 * own environment), for multi-node tests over a real transporter. Each child leads its own process group (with the
 * embedded servers it starts).
 *
 * Not the `tsx` command: it relays a SIGTERM to its child and SIGKILLs the child when the child's event loop has not
 * acknowledged the signal within 30 ms, which a node busy with a burst of writes often cannot do (the clean-stop
 * test then saw a node killed before it logged a line of its stop).
 */
import { spawn, type ChildProcess } from "child_process";
import http from "http";
import { randomBytes } from "crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "fs";
import os from "os";
import path from "path";
import Redis from "ioredis";
import { connect } from "nats";
import { DOMAINS } from "../../catalog";
import type { HttpResult } from "./platform";
import { seedEmbeddedPg } from "./pg-template";

const ROOT = path.resolve(__dirname, "../..");

/** Every domain service: what a "domain node" runs beside the gateway node. */
export const ALL_DOMAINS = DOMAINS.map((d) => d.name).join(",");

/** Settings a test deployment shares: its own namespace, Redis prefix and keys, so parallel runs never meet. */
export function testDeployment() {
	const id = randomBytes(6).toString("hex");
	return {
		id,
		namespace: `test-${id}`,
		redisPrefix: `test:${id}:`,
		jwtSecret: randomBytes(32).toString("base64url"),
		aesSecret: randomBytes(32).toString("base64url"),
	};
}

/**
 * What every node of a test deployment on the local servers shares: NATS as transporter, Redis under the
 * deployment's prefix, its keys, and documents in the given PostgreSQL database.
 */
export function clusterSettings(d: ReturnType<typeof testDeployment>, databaseUrl: string): Record<string, string> {
	return {
		TRANSPORTER: "nats://127.0.0.1:4222",
		NAMESPACE: d.namespace,
		JWT_SECRET: d.jwtSecret,
		AES_SECRET: d.aesSecret,
		REDIS_URL: "redis://127.0.0.1:6379",
		REDIS_PREFIX: d.redisPrefix,
		DOCUMENT_STORE: "postgres",
		DATABASE_URL: databaseUrl,
	};
}

export interface ChildNode {
	name: string;
	pid: number;
	dataDir: string;
	/** False when the caller gave DATA_DIR: the caller removes it (it may outlive the node, e.g. a restart). */
	ownsDataDir: boolean;
	child: ChildProcess;
	/** Everything the node printed so far (shown when a test fails). */
	output(): string;
	exited: Promise<number | null>;
}

/** Environment settings a parent (jest, CI) may carry that must not leak into a test node. */
const OWN_SETTINGS = [
	"PORT",
	"HOST",
	"DATA_DIR",
	"SERVICES",
	"TRANSPORTER",
	"NAMESPACE",
	"NODE_ID",
	"REDIS_URL",
	"REDIS_PREFIX",
	"MONGO_URI",
	"DATABASE_URL",
	"MQTT_URL",
	"SERVICE_PORTS",
	"OPS_PORT_OFFSET",
	"JWT_SECRET",
	"AES_SECRET",
	"TRUST_PROXY",
	"LOG_LEVEL",
	"PLATFORM_ROOT_DOMAIN",
	"PLATFORM_ROOT_CLIENT_ID",
	"PLATFORM_ROOT_CLIENT_SECRET",
	"PLATFORM_ROOT_USERNAME",
	"PLATFORM_ROOT_PASSWORD",
	"EVENT_STREAM",
	"STREAM_URL",
	"STREAM_ACK_WAIT_MS",
	"STREAM_RETENTION_HOURS",
	"STREAM_MAX_MESSAGES",
	"STREAM_MAX_IN_FLIGHT",
	"STREAM_MAX_RETRIES",
	"RELAY_SETTLE_MS",
];

/**
 * How the image starts a node (Dockerfile CMD: `node --import tsx start.ts`) from the app directory `cwd`, as the
 * unprivileged `uid`/`gid`; without it, the same command in this checkout as the test's own user.
 */
export interface AsImage {
	cwd: string;
	uid: number;
	gid: number;
}

/** `npm start`'s entry (start.ts), or `npm run runner`'s (moleculer-runner with moleculer.config.ts). */
export type Entry = "start" | "runner";
const ENTRY_ARGS: Record<Entry, string[]> = {
	start: ["start.ts"],
	runner: [path.join("node_modules", "moleculer", "bin", "moleculer-runner.js"), "--config", "moleculer.config.ts"],
};

export function startNode(name: string, env: Record<string, string>, image?: AsImage, entry: Entry = "start"): ChildNode {
	// A DATA_DIR given by the caller is used as is, and left for the caller to remove.
	const dataDir = env.DATA_DIR ?? mkdtempSync(path.join(os.tmpdir(), `node-${name}-`));
	// A new DATA_DIR of ours gets the initialised cluster when a platform of this run built it (pg-template.ts).
	if (!env.DATA_DIR && !image) seedEmbeddedPg(dataDir, env.DATABASE_URL);
	const base: NodeJS.ProcessEnv = { ...process.env };
	for (const k of OWN_SETTINGS) delete base[k];
	const child = spawn(process.execPath, ["--import", "tsx", ...ENTRY_ARGS[entry]], {
		cwd: image?.cwd ?? ROOT,
		uid: image?.uid,
		gid: image?.gid,
		env: { ...base, HOST: "127.0.0.1", LOG_LEVEL: "warn", DATA_DIR: dataDir, NODE_ID: `${name}-${randomBytes(3).toString("hex")}`, TOUCH_EMAIL_SENDERS: "example.com", ...env },
		stdio: ["ignore", "pipe", "pipe"],
		detached: true,
	});
	let out = "";
	const keep = (b: Buffer) => {
		out += b.toString();
		if (out.length > 200_000) out = out.slice(-100_000);
	};
	child.stdout!.on("data", keep);
	child.stderr!.on("data", keep);
	// 'exit' can come before the pipes are read to their end (the last lines, e.g. a stop's log, still unread):
	// `exited` waits for both streams to close too, at most 2 s more (a grandchild may still hold them open).
	const streamsClosed = new Promise<void>((resolve) => child.once("close", () => resolve()));
	const exited = new Promise<number | null>((resolve) =>
		child.once("exit", (code) => {
			const t = setTimeout(() => resolve(code), 2000);
			void streamsClosed.then(() => {
				clearTimeout(t);
				resolve(code);
			});
		}),
	);
	if (!child.pid) throw new Error(`could not start ${name}`);
	return { name, pid: child.pid, dataDir, ownsDataDir: env.DATA_DIR === undefined, child, output: () => out, exited };
}

/**
 * SIGTERM to the node's PID (a clean broker stop that tells the other
 * nodes), SIGKILL to its process group after `graceMs` or once it has exited; removes the DATA_DIR it made.
 */
export async function stopNode(node: ChildNode | undefined, graceMs = 5000): Promise<void> {
	if (!node) return;
	const kill = (pid: number, sig: NodeJS.Signals) => {
		try {
			process.kill(pid, sig);
		} catch {
			/* already gone */
		}
	};
	if (node.child.exitCode === null && node.child.signalCode === null) {
		kill(node.pid, "SIGTERM");
		const t = setTimeout(() => kill(-node.pid, "SIGKILL"), graceMs);
		await node.exited;
		clearTimeout(t);
	}
	// Whatever of its process group is left goes too.
	kill(-node.pid, "SIGKILL");
	if (node.ownsDataDir) rmSync(node.dataDir, { recursive: true, force: true });
}

/**
 * A crash: SIGKILL to the node's process group (no clean broker stop, no
 * chance to release anything), then waits until no process of the group is left (bounded by `timeoutMs`).
 * `stopNode` afterwards only removes its DATA_DIR.
 */
export async function crashNode(node: ChildNode, timeoutMs = 5000): Promise<void> {
	// A zombie (killed, not yet reaped by whoever adopted it) is dead: on Linux the group is read from /proc.
	const alive = () => {
		if (existsSync("/proc/self/stat")) {
			for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
				let stat: string;
				try {
					stat = readFileSync(`/proc/${pid}/stat`, "utf8");
				} catch {
					continue;
				}
				const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
				if (Number(pgrp) === node.pid && state !== "Z") return true;
			}
			return false;
		}
		try {
			process.kill(-node.pid, 0);
			return true;
		} catch {
			return false;
		}
	};
	try {
		process.kill(-node.pid, "SIGKILL");
	} catch {
		/* already gone */
	}
	const deadline = Date.now() + timeoutMs;
	let timer: NodeJS.Timeout | undefined;
	await Promise.race([node.exited, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
	clearTimeout(timer);
	while (alive()) {
		if (Date.now() > deadline) throw new Error(`${node.name} (process group ${node.pid}) still alive ${timeoutMs} ms after SIGKILL`);
		await new Promise((r) => setTimeout(r, 20));
	}
}

/** Polls `url` until it answers `status` (default 200); fails with the nodes' output when they die or time out. */
export async function waitForHttp(url: string, nodes: ChildNode[], opts: { status?: number; timeoutMs?: number } = {}): Promise<HttpResult> {
	const want = opts.status ?? 200;
	const deadline = Date.now() + (opts.timeoutMs ?? 45_000);
	let last = "no answer";
	while (Date.now() < deadline) {
		for (const n of nodes) if (n.child.exitCode !== null) throw new Error(`${n.name} exited with ${n.child.exitCode} while waiting for ${url}:\n${n.output()}`);
		try {
			const res = await fetch(url, { signal: AbortSignal.timeout(3000) });
			const text = await res.text();
			last = `${res.status} ${text.slice(0, 2000)}`;
			if (res.status === want) {
				let body: any = text;
				try {
					body = JSON.parse(text);
				} catch {
					/* text */
				}
				return { status: res.status, body, headers: res.headers, text };
			}
		} catch (err) {
			last = String(err);
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`${url} did not answer ${want} in time; last: ${last}\n${nodes.map((n) => `--- ${n.name}:\n${n.output()}`).join("\n")}`);
}

export { client } from "./platform";

/** Deletes every key a test deployment wrote under its Redis prefix (blacklists live 400 days otherwise). */
export async function dropRedisPrefix(url: string, prefix: string): Promise<void> {
	const raw = new Redis(url, { maxRetriesPerRequest: 1 });
	try {
		let cursor = "0";
		do {
			const [next, keys] = await raw.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 500);
			cursor = next;
			if (keys.length) await raw.del(...keys);
		} while (cursor !== "0");
	} finally {
		raw.disconnect();
	}
}

/** Deletes the JetStream streams of a test deployment's namespace (`<namespace>_...`) on the local NATS. */
export async function dropNatsStreams(namespace: string, url = "127.0.0.1:4222"): Promise<void> {
	const nc = await connect({ servers: url });
	try {
		const jsm = await nc.jetstreamManager();
		for await (const name of jsm.streams.names()) if (name.startsWith(`${namespace}_`)) await jsm.streams.delete(name);
	} finally {
		await nc.close();
	}
}

/** A webhook receiver on a free port: `delivered` holds the ids of the `topic` documents whose create events came. */
export interface EventReceiver {
	url: string;
	delivered: Set<string>;
	close(): Promise<void>;
}

export async function eventReceiver(topic = "content.notes"): Promise<EventReceiver> {
	const delivered = new Set<string>();
	const server = http.createServer((req, res) => {
		let text = "";
		req.on("data", (c) => (text += c));
		req.on("end", () => {
			try {
				const ev = JSON.parse(text);
				if (ev?.topic === topic && ev.op === "c") delivered.add(ev.id);
			} catch {
				/* not an event */
			}
			res.writeHead(200).end("ok");
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	return {
		url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
		delivered,
		async close() {
			server.closeAllConnections();
			await new Promise((r) => server.close(r));
		},
	};
}

/**
 * Milliseconds until `rounds` rounds in a row of a login, the new token's first request, a create and a list (with
 * `token`) all answer 200 through `gw`; after `boundMs`, an error with the last answers and the nodes' output.
 */
export async function timeToServe(
	gw: ReturnType<typeof import("./platform").client>,
	root: { client_id: string; username: string; password: string },
	token: string,
	opts: { boundMs: number; nodes: ChildNode[]; rounds?: number },
): Promise<number> {
	const started = Date.now();
	let ok = 0;
	let last = "";
	while (ok < (opts.rounds ?? 3)) {
		if (Date.now() - started > opts.boundMs)
			throw new Error(
				`not serving normally ${opts.boundMs} ms after the server came back; last answers: ${last}\n${opts.nodes.map((n) => `--- ${n.name}:\n${n.output().slice(-3000)}`).join("\n")}`,
			);
		const l = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
		const v = l.status === 200 ? await gw("GET", "/auth/verify", { token: l.body.data.access_token }) : l;
		const c = await gw("POST", "/content/notes", { token, body: { title: "after" } });
		const g = await gw("GET", "/content/notes", { token });
		ok = [l, v, c, g].every((r) => r.status === 200) ? ok + 1 : 0;
		last = [l, v, c, g].map((r) => `${r.status} ${r.text.slice(0, 200)}`).join(" | ");
		if (!ok) await new Promise((r) => setTimeout(r, 200));
	}
	return Date.now() - started;
}
