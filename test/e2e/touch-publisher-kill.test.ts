/**
 * A publisher killed mid-batch (SIGKILL) loses no email, over the local NATS (TRANSPORTER and EVENT_STREAM=nats,
 * JetStream consumer groups): a main node (gateway, every domain, every worker but the publisher) and two
 * publisher-only nodes (SERVICES=publisher), each sending through an SMTP server of its own in this process (so each
 * received copy says which publisher sent it). The receivers are slow (150 ms per message before the answer), so the
 * kill lands while messages are in flight. 100 emails through POST /touch/emails/send; publisher A is killed once
 * its receiver has some of them and others are still to go.
 *
 * The window this test shows, and does not hide: SMTP has no idempotent submit. A receiver that has the whole
 * message (end of DATA) and a publisher that dies before it has settled the record (before it reads the 250 answer,
 * or between the answer and the settle) leave the record SENDING under the dead publisher's lease (60 s); the other
 * publisher then sends it again: the same email reaches the receiver twice, with the same Message-ID
 * (`<record id@root domain>`) and the same `X-Platform-Email`. At most the messages the dead publisher had in
 * flight (its SMTP pool: 5 connections) are doubled. What holds, and is asserted: every email arrives (none lost),
 * every record ends SENT once, a second copy only ever comes from a message the killed publisher was sending when it
 * died, and a receiver that keeps one message per Message-ID (as mail stores commonly do) holds each email exactly
 * once.
 *
 * Skips with a message when NATS is not answering (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import { connect } from "nats";
import { SMTPServer } from "smtp-server";
import { DOMAINS } from "../../catalog";
import { WORKER_PORTS } from "../../workers";
import { needServers } from "../helpers/platform";
import { client, crashNode, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { DOMAIN_SPEC_PORTS, freeOpsOffset, freePort } from "../helpers/ports";

/** The publishers' lease on a message they send (TOUCH_LEASE_MS). */
const LEASE = 8_000;

const nats = needServers(["NATS", 4222]);

jest.setTimeout(240_000);

const NATS = "nats://127.0.0.1:4222";
const N = 100;
const SLOW_MS = 150;
const deployment = testDeployment();

interface Copy {
	id: string;
	messageId: string;
	via: "A" | "B";
	at: number;
}

const copies: Copy[] = [];
const servers: SMTPServer[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A receiver that has a message once its DATA has ended (as an MTA that queued it), then answers after SLOW_MS. */
function receiver(via: "A" | "B"): Promise<number> {
	const s = new SMTPServer({
		disabledCommands: ["STARTTLS", "AUTH"],
		closeTimeout: 100,
		onData(stream, _session, cb) {
			const chunks: Buffer[] = [];
			stream.on("data", (c: Buffer) => chunks.push(c));
			stream.on("end", () => {
				const raw = Buffer.concat(chunks).toString("latin1");
				copies.push({ id: /^X-Platform-Email: (\w+)/im.exec(raw)?.[1] ?? "", messageId: /^Message-ID: (\S+)/im.exec(raw)?.[1] ?? "", via, at: Date.now() });
				setTimeout(() => cb(), SLOW_MS);
			});
		},
		logger: false,
	});
	// A publisher killed (or stopped) mid-connection resets it: expected here, not a failure of the receiver.
	s.on("error", () => undefined);
	servers.push(s);
	return new Promise((resolve) => s.listen(0, "127.0.0.1", () => resolve((s.server.address() as any).port)));
}

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, ms: number, every = 200): Promise<T> {
	const end = Date.now() + ms;
	for (;;) {
		const v = await Promise.resolve(fn()).catch(() => null);
		if (v) return v as T;
		if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
		await sleep(every);
	}
}

let up = false;
let nodes: ChildNode[] = [];
let main: ChildNode;
let pubA: ChildNode;
let gw: ReturnType<typeof client>;
let token = "";
let rootDomain = "";

beforeAll(async () => {
	up = nats.up;
	if (!up) return;
	const [smtpA, smtpB] = await Promise.all([receiver("A"), receiver("B")]);
	const pub = WORKER_PORTS.publisher;
	const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, ...Object.values(WORKER_PORTS), pub + 1, pub + 2]);
	const port = await freePort();
	const shared = {
		TRANSPORTER: NATS,
		EVENT_STREAM: "nats",
		STREAM_ACK_WAIT_MS: "2000",
		NAMESPACE: deployment.namespace,
		JWT_SECRET: deployment.jwtSecret,
		AES_SECRET: deployment.aesSecret,
		OPS_PORT_OFFSET: String(offset),
	};
	const onMain = ["api", ...DOMAINS.map((d) => d.name), ...Object.keys(WORKER_PORTS).filter((w) => w !== "publisher")];
	main = startNode("main", { ...shared, SERVICES: onMain.join(","), PORT: String(port) });
	// A short lease (8 s instead of 60 s): the take-over is the same, the test waits less.
	pubA = startNode("publisher-a", { ...shared, TOUCH_LEASE_MS: String(LEASE), SERVICES: "publisher", OPS_PORT_OFFSET: String(offset + 1), SMTP_URL: `smtp://127.0.0.1:${smtpA}` });
	const pubB = startNode("publisher-b", {
		...shared,
		TOUCH_LEASE_MS: String(LEASE),
		SERVICES: "publisher",
		OPS_PORT_OFFSET: String(offset + 2),
		SMTP_URL: `smtp://127.0.0.1:${smtpB}`,
	});
	nodes = [main, pubA, pubB];
	await Promise.all([
		waitForHttp(`http://127.0.0.1:${port}/status`, nodes, { timeoutMs: 60_000 }),
		waitForHttp(`http://127.0.0.1:${pub + offset + 1}/status`, nodes, { timeoutMs: 60_000 }),
		waitForHttp(`http://127.0.0.1:${pub + offset + 2}/status`, nodes, { timeoutMs: 60_000 }),
	]);
	gw = client(`http://127.0.0.1:${port}`);
	const root = JSON.parse(readFileSync(path.join(main.dataDir, "bootstrap.json"), "utf8"));
	rootDomain = root.domain;
	const login = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	if (login.status !== 200) throw new Error(`root login failed: ${login.status} ${login.text}`);
	token = login.body.data.access_token;
}, 90_000);

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
	if (!up) return;
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		for await (const name of jsm.streams.names()) if (name.startsWith(`${deployment.namespace}_`)) await jsm.streams.delete(name);
	} finally {
		await nc.close();
	}
}, 30_000);

nats.test("publisher A SIGKILLed mid-batch: no email lost, every record SENT once; a second copy only of what A had in flight, same Message-ID", async () => {
	// Both publishers must be consuming before the batch (their consumer group on the stream, their due poll).
	const probe = await gw("POST", "/touch/emails/send", { token, body: { to: ["probe@example.com"], from: "noreply@example.com", subject: "probe", text: "p" } });
	expect(probe.status).toBe(200);
	await until("the probe delivered", () => copies.some((c) => c.id === probe.body.data.id), 30_000);

	const ids: string[] = [];
	const sendAll = (async () => {
		for (let i = 0; i < N; i += 10) {
			const batch = await Promise.all(
				Array.from({ length: 10 }, (_, k) =>
					gw("POST", "/touch/emails/send", { token, body: { to: [`u${i + k}@example.com`], from: "noreply@example.com", subject: `kill ${i + k}`, text: `body ${i + k}` } }),
				),
			);
			for (const r of batch) {
				expect(r.status).toBe(200);
				ids.push(r.body.data.id);
			}
		}
	})();
	const ofBatch = () => copies.filter((c) => ids.includes(c.id));
	// Mid-batch: A has delivered a few, and much is still to go.
	await until("publisher A sending", () => ofBatch().filter((c) => c.via === "A").length >= 5, 60_000, 10);
	await crashNode(pubA);
	const killedAt = Date.now();
	const beforeKill = new Set(ofBatch().map((c) => c.id));
	await sendAll;
	expect(ids).toHaveLength(N);
	expect(beforeKill.size).toBeLessThan(N);

	// A's claimed records come back to B after their lease.
	const page = encodeURIComponent(JSON.stringify({ limit: N }));
	const list = async () => (await gw("GET", `/touch/emails?query=${encodeURIComponent(JSON.stringify({ id: { $in: ids } }))}&pagination=${page}`, { token })).body;
	let last: any;
	await until(
		"every record SENT",
		async () => {
			last = await list();
			return last.total === N && last.items.every((r: any) => r.state === "SENT");
		},
		150_000,
		1000,
	).catch((err) => {
		const states: Record<string, number> = {};
		for (const r of last?.items ?? []) states[r.state] = (states[r.state] ?? 0) + 1;
		throw new Error(
			`${err.message}; last answer: total ${last?.total} ${last?.message ?? ""} states ${JSON.stringify(states)}; copies A ${ofBatch().filter((c) => c.via === "A").length} B ${ofBatch().filter((c) => c.via === "B").length}`,
		);
	});
	await sleep(3000);

	const mine = ofBatch();
	const byId = new Map<string, Copy[]>();
	for (const c of mine) byId.set(c.id, [...(byId.get(c.id) ?? []), c]);
	// No email lost.
	expect([...byId.keys()].sort()).toEqual([...ids].sort());
	// Every copy carries the record's Message-ID: a receiver keeping one message per Message-ID holds each once.
	for (const c of mine) expect(c.messageId).toBe(`<${c.id}@${rootDomain}>`);
	expect(new Set(mine.map((c) => c.messageId)).size).toBe(N);
	// Second copies: only of a message A had sent in full before it died, resent by B after A's lease.
	const doubled = [...byId.entries()].filter(([, cs]) => cs.length > 1);
	for (const [, cs] of doubled) {
		expect(cs).toHaveLength(2);
		expect(cs[0].via).toBe("A");
		expect(cs[0].at).toBeLessThanOrEqual(killedAt);
		expect(cs[1].via).toBe("B");
		expect(cs[1].at - cs[0].at).toBeGreaterThan(LEASE - 2_000);
	}
	expect(doubled.length).toBeLessThanOrEqual(5);
	console.log(
		`touch-publisher-kill: ${beforeKill.size} of ${N} received before the kill, ${mine.filter((c) => c.via === "A").length} copies via A, ${mine.filter((c) => c.via === "B").length} via B, ${doubled.length} received twice (A had them in flight)`,
	);
	// Each record was settled SENT once: no record is FAILED or left QUEUED/SENDING.
	const records = (await list()).items as any[];
	expect(records).toHaveLength(N);
	expect(records.every((r) => r.state === "SENT" && r.smtp?.message_id === `<${r.id}@${rootDomain}>`)).toBe(true);
});
