/**
 * The dispatcher worker through HTTP: a local webhook receiver on 127.0.0.1 registered as the root client's CQRS
 * config gets every change with the exact payload, the Authorization header and a Standard Webhooks signature, no
 * secret field; a receiver that is down (closed port, then 503) across a platform restart gets everything, in
 * per-document order; 410 and exhausted retries disable the config; private addresses are refused unless allowed;
 * deliveries and attempts are recorded in the relational store (embedded PostgreSQL, and the real PostgreSQL in one
 * test) and can be replayed.
 */
import http from "http";
import { randomBytes } from "crypto";
import { Pool } from "pg";
import { bootPlatform, dataDirHoldingOutbox, needServers, type TestPlatform } from "../helpers/platform";
import { sharedOutbox } from "../../events/outbox";
import { verify } from "../../workers/dispatcher/signature";

import { sleep } from "../helpers/wait";

/** PostgreSQL, for the block that needs it: decided when the file loads, so jest reports its tests as skipped without it. */
const servers = needServers(["PostgreSQL", 5432]);
const AUTH = `Bearer hook-${randomBytes(6).toString("hex")}`;
const SECRET = `shared-${randomBytes(8).toString("hex")}`;

interface Received {
	headers: http.IncomingHttpHeaders;
	text: string;
	body: any;
	status: number;
	at: number;
}

/** A webhook receiver: answers `mode` (200 by default), records every request; can go down and come back on its port. */
class Receiver {
	server?: http.Server;
	port = 0;
	mode = 200;
	requests: Received[] = [];

	async start(port = this.port): Promise<void> {
		const server = http.createServer((req, res) => {
			const chunks: Buffer[] = [];
			req.on("data", (c) => chunks.push(c));
			req.on("end", () => {
				const text = Buffer.concat(chunks).toString("utf8");
				let body: any;
				try {
					body = JSON.parse(text);
				} catch {
					body = undefined;
				}
				const status = this.mode;
				this.requests.push({ headers: req.headers, text, body, status, at: Date.now() });
				res.writeHead(status, { "content-type": "text/plain" }).end(status < 300 ? "ok" : "no");
			});
		});
		await new Promise<void>((resolve, reject) => {
			server.once("error", reject);
			server.listen(port, "127.0.0.1", () => resolve());
		});
		this.server = server;
		this.port = (server.address() as { port: number }).port;
	}

	async stop(): Promise<void> {
		const s = this.server;
		this.server = undefined;
		if (!s) return;
		s.closeAllConnections();
		await new Promise<void>((resolve) => s.close(() => resolve()));
	}

	url(path = "/hook"): string {
		return `http://127.0.0.1:${this.port}${path}`;
	}

	/** Requests answered 2xx, for one document. */
	accepted(docId?: string): Received[] {
		return this.requests.filter((r) => r.status >= 200 && r.status < 300 && (docId === undefined || r.body?.id === docId));
	}

	/** First accepted request per webhook-id, in arrival order (receivers deduplicate by webhook-id). */
	acceptedOnce(docId: string): Received[] {
		const seen = new Set<string>();
		return this.accepted(docId).filter((r) => {
			const id = String(r.headers["webhook-id"]);
			if (seen.has(id)) return false;
			seen.add(id);
			return true;
		});
	}
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 15_000): Promise<T> {
	const end = Date.now() + timeoutMs;
	let last: unknown;
	for (;;) {
		try {
			const v = await fn();
			if (v) return v as T;
		} catch (err) {
			last = err;
		}
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? ` (${(last as Error).message})` : ""}`);
		await sleep(50);
	}
}

type Row = {
	id: string;
	status: string;
	attempts: number;
	op: string;
	topic: string;
	url: string;
	config_id: string;
	client_id: string;
	last_status: number | null;
	last_error: string | null;
	event_id: string;
};

const deliveries = (p: TestPlatform, filter: Record<string, unknown>) => p.broker.call("dispatcher.deliveries", filter) as Promise<Row[]>;
const delivery = (p: TestPlatform, id: string) =>
	p.broker.call("dispatcher.delivery", { id }) as Promise<
		Row & { payload: any; attempts_list: Array<{ attempt: number; status: number | null; error: string | null; url: string }> }
	>;

/** Every recorded delivery settled (none pending) and the stream drained (the last outbox record handled). */
async function settled(p: TestPlatform): Promise<void> {
	await waitFor("the dispatcher to go idle", async () => {
		const [last] = (await sharedOutbox(p.cfg).readFrom(0, 100000)).slice(-1);
		const stats = (await p.broker.call("dispatcher.stats")) as { pending: number };
		const consumed = last ? (p.broker.getLocalService("dispatcher") as any).consumer.position() >= last.seq : true;
		return stats.pending === 0 && consumed;
	});
}

/** The outbox records of one document, in stream order: what the receiver must get, byte for byte. */
async function expectedBodies(p: TestPlatform, docId: string): Promise<string[]> {
	const recs = await sharedOutbox(p.cfg).readFrom(0, 100000);
	return recs.filter((r) => r.event.id === docId).map((r) => JSON.stringify(r.event));
}

/** Registers (or re-points) the root client's CQRS webhook; returns the config id. */
async function setWebhook(p: TestPlatform, token: string, value: Record<string, unknown>, id?: string): Promise<string> {
	const r = id
		? await p.http("PATCH", `/context/configs/${id}`, { token, body: { value } })
		: await p.http("POST", "/context/configs", { token, body: { key: "CQRS", eid: p.root.client_id, value } });
	expect(r.status).toBe(200);
	return r.body.data.id;
}

/** Every key at any depth of a JSON value. */
function keysDeep(v: unknown, out: string[] = []): string[] {
	if (Array.isArray(v)) v.forEach((x) => keysDeep(x, out));
	else if (v && typeof v === "object")
		for (const [k, x] of Object.entries(v)) {
			out.push(k);
			keysDeep(x, out);
		}
	return out;
}

/** Long enough to outlast a closed port, a platform restart and a 503 phase (≈ 14 s), short enough for a test. */
const PATIENT_SCHEDULE = [0, 0.2, 0.4, 0.8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];

describe("dispatcher, embedded PostgreSQL", () => {
	let p: TestPlatform;
	let token: string;
	let configId: string;
	const rx = new Receiver();

	beforeAll(async () => {
		await rx.start();
		// Every change event stays in the outbox: expectedBodies reads it.
		p = await bootPlatform({ dataDir: dataDirHoldingOutbox(), webhookAllowPrivate: true, webhookRetrySchedule: PATIENT_SCHEDULE });
		token = await p.rootToken();
		configId = await setWebhook(p, token, { webhook: rx.url(), authorization: AUTH, secret: SECRET });
		await settled(p);
	}, 60_000);
	afterAll(async () => {
		await p?.cleanup();
		await rx.stop();
	});

	test("the worker reports its relational store and event stream", async () => {
		const h = (await p.broker.call("dispatcher.health")) as { status: string; info: Record<string, { status: string }> };
		expect(h).toEqual({ status: "ok", info: { "event stream": { status: "up" }, "relational store": { status: "up" } } });
		const s = await p.http("GET", "/status");
		expect(s.status).toBe(200);
		expect(s.body.info["service:dispatcher"]).toEqual({ status: "up" });
		expect(s.body.info["relational store"]).toEqual({ status: "up" });
		expect(s.body.info["event stream"]).toEqual({ status: "up" });
	});

	test("every op reaches the receiver with the exact payload, Authorization and a verifiable signature", async () => {
		const c = await p.http("POST", "/content/notes", { token, body: { title: "one", content: "first" } });
		const id = c.body.data.id;
		const u = await p.http("PATCH", `/content/notes/${id}`, { token, body: { title: "two" } });
		const d = await p.http("DELETE", `/content/notes/${id}`, { token });
		const r = await p.http("PUT", `/content/notes/${id}/restore`, { token });
		const x = await p.http("DELETE", `/content/notes/${id}/destroy`, { token });
		for (const res of [c, u, d, r, x]) expect(res.status).toBe(200);
		const bc = await p.http("POST", "/content/notes/bulk", { token, body: { items: [{ title: "b1" }, { title: "b2" }] } });
		expect(bc.status).toBe(200);
		const bulkIds: string[] = bc.body.items.map((i: { id: string }) => i.id);
		const bp = await p.http("PATCH", `/content/notes/bulk?query=${encodeURIComponent(JSON.stringify({ id: { $in: bulkIds } }))}`, { token, body: { content: "bulk" } });
		expect(bp.body).toEqual({ total: 2 });

		const got = await waitFor("five events of the note", () => rx.accepted(id).length >= 5 && rx.accepted(id));
		for (const b of bulkIds) await waitFor("two events of each bulk note", () => rx.accepted(b).length >= 2);
		expect(rx.accepted(id)).toHaveLength(5);

		// Byte for byte the change events of the outbox, in order.
		expect(got.map((g) => g.text)).toEqual(await expectedBodies(p, id));
		expect(got.map((g) => g.body.op)).toEqual(["c", "u", "d", "r", "d"]);
		const [ec, eu, ed, er, ex] = got.map((g) => g.body);
		const source = { name: "platform", db: "content", collection: "notes" };
		for (const e of [ec, eu, ed, er, ex]) {
			expect(e).toMatchObject({ id, topic: "content.notes", source });
			expect(Object.keys(e).every((k) => ["id", "ts_ms", "op", "topic", "source", "after", "before"].includes(k))).toBe(true);
			expect(Math.abs(e.ts_ms - Date.now())).toBeLessThan(60_000);
		}
		expect(ec.after).toEqual(c.body.data);
		expect(ec.before).toBeUndefined();
		expect(eu).toMatchObject({ before: c.body.data, after: u.body.data });
		expect(ed.after).toBeUndefined();
		expect(ed.before).toEqual(u.body.data);
		expect(er).toMatchObject({ before: d.body.data, after: r.body.data });
		expect(ex.after).toBeUndefined();
		expect(ex.before).toEqual(r.body.data);
		for (const b of bulkIds) {
			const evs = rx.accepted(b).map((g) => g.body);
			expect(evs.map((e) => e.op)).toEqual(["c", "u"]);
			expect(evs[0].after).toEqual(bc.body.items.find((i: { id: string }) => i.id === b));
			expect(evs[1].after).toMatchObject({ id: b, content: "bulk" });
			expect(rx.accepted(b).map((g) => g.text)).toEqual(await expectedBodies(p, b));
		}

		// Headers: Authorization as configured, Standard Webhooks id/timestamp/signature, one id per event.
		const all = [...got, ...bulkIds.flatMap((b) => rx.accepted(b))];
		for (const g of all) {
			expect(g.headers["content-type"]).toBe("application/json");
			expect(g.headers.authorization).toBe(AUTH);
			const wid = String(g.headers["webhook-id"]);
			const ts = Number(g.headers["webhook-timestamp"]);
			expect(wid).toMatch(/^msg_[A-Za-z0-9_-]{32}$/);
			expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(60);
			expect(verify(SECRET, wid, ts, g.text, String(g.headers["webhook-signature"]))).toBe(true);
			expect(verify("another secret", wid, ts, g.text, String(g.headers["webhook-signature"]))).toBe(false);
		}
		expect(new Set(all.map((g) => g.headers["webhook-id"])).size).toBe(all.length);

		// Recorded: one delivered row per event, one 200 attempt each.
		await settled(p);
		const rows = await deliveries(p, { document_id: id });
		expect(rows.map((row) => [row.op, row.status, row.attempts, row.last_status])).toEqual([
			["c", "delivered", 1, 200],
			["u", "delivered", 1, 200],
			["d", "delivered", 1, 200],
			["r", "delivered", 1, 200],
			["d", "delivered", 1, 200],
		]);
		for (const row of rows) expect(row).toMatchObject({ client_id: p.root.client_id, config_id: configId, url: rx.url(), topic: "content.notes" });
		const one = await delivery(p, rows[1].id);
		expect(one.payload).toEqual(eu);
		expect(one.attempts_list).toEqual([expect.objectContaining({ attempt: 1, status: 200, error: null, url: rx.url() })]);
	});

	test("no secret, password or hash ever appears in a payload", async () => {
		const tag = randomBytes(4).toString("hex");
		const password = `Pw-${randomBytes(8).toString("hex")}`;
		const clientSecret = `Cs-${randomBytes(8).toString("hex")}`;
		const user = await p.http("POST", "/identity/users", { token, body: { username: `hook-${tag}`, password } });
		expect(user.status).toBe(200);
		const newPassword = `Pw2-${randomBytes(8).toString("hex")}`;
		expect((await p.http("PATCH", `/identity/users/${user.body.data.id}`, { token, body: { password: newPassword } })).status).toBe(200);
		const client = await p.http("POST", "/domain/clients", { token, body: { name: `hook ${tag}`, secret: clientSecret, domains: [`${tag}.local`] } });
		expect(client.status).toBe(200);
		const rotated = `Cs2-${randomBytes(8).toString("hex")}`;
		expect((await p.http("PATCH", `/domain/clients/${client.body.data.id}`, { token, body: { secret: rotated } })).status).toBe(200);
		// The CQRS config's own change events carry its value without the credentials.
		await setWebhook(p, token, { webhook: rx.url(), authorization: AUTH, secret: SECRET }, configId);

		await waitFor("user events", () => rx.accepted(user.body.data.id).length >= 2);
		await waitFor("client events", () => rx.accepted(client.body.data.id).length >= 2);
		await waitFor("config event", () => rx.accepted(configId).length >= 1);
		await settled(p);
		expect(rx.accepted(user.body.data.id)[0].body.after).toMatchObject({ username: `hook-${tag}` });
		const cfgEvent = rx.accepted(configId).slice(-1)[0].body;
		expect(cfgEvent.after.value).toEqual({ webhook: rx.url() });
		for (const g of rx.requests) {
			expect(keysDeep(g.body).filter((k) => /password|hash|secret/i.test(k))).toEqual([]);
			for (const s of [password, newPassword, clientSecret, rotated, SECRET, AUTH]) expect(g.text).not.toContain(s);
		}
	});

	test("a receiver down for a while (closed port, then 503) across a platform restart gets everything in per-document order", async () => {
		await settled(p);
		await rx.stop();
		const port = rx.port;
		const a = (await p.http("POST", "/content/notes", { token, body: { title: "A0" } })).body.data.id;
		const b = (await p.http("POST", "/content/notes", { token, body: { title: "B0" } })).body.data.id;
		for (let i = 1; i <= 3; i++) {
			expect((await p.http("PATCH", `/content/notes/${a}`, { token, body: { title: `A${i}` } })).status).toBe(200);
			expect((await p.http("PATCH", `/content/notes/${b}`, { token, body: { title: `B${i}` } })).status).toBe(200);
		}
		expect((await p.http("DELETE", `/content/notes/${a}`, { token })).status).toBe(200);
		expect((await p.http("PUT", `/content/notes/${a}/restore`, { token })).status).toBe(200);
		// Queued and already failing before the restart; the later events of each note wait behind the first.
		// A's first event has failed at least twice (B's may be at its first retry or its second: they run apart).
		await waitFor("failed first attempts", async () => {
			const ofA = await deliveries(p, { document_id: a });
			const rows = [...ofA, ...(await deliveries(p, { document_id: b }))];
			return rows.length === 10 && rows.every((r) => r.status === "pending") && ofA[0].attempts >= 2 && rows;
		});
		const blocked = await deliveries(p, { document_id: a });
		expect(blocked[0].attempts).toBeGreaterThanOrEqual(2);
		expect(blocked.slice(1).every((r) => r.attempts === 0)).toBe(true);

		await p.restart();
		// Still down after the restart: a few more writes.
		expect((await p.http("PATCH", `/content/notes/${a}`, { token, body: { title: "A4" } })).status).toBe(200);
		expect((await p.http("PATCH", `/content/notes/${b}`, { token, body: { title: "B4" } })).status).toBe(200);
		await sleep(300);
		rx.mode = 503;
		await rx.start(port);
		await waitFor("503 answers", () => rx.requests.some((r) => r.status === 503 && (r.body?.id === a || r.body?.id === b)));
		await sleep(500);
		rx.mode = 200;

		await waitFor("every event of A and B", async () => rx.acceptedOnce(a).length >= 7 && rx.acceptedOnce(b).length >= 5, 30_000);
		await settled(p);
		// Nothing lost, nothing out of order: exactly the outbox's events of each note, in its order.
		expect(rx.acceptedOnce(a).map((g) => g.text)).toEqual(await expectedBodies(p, a));
		expect(rx.acceptedOnce(b).map((g) => g.text)).toEqual(await expectedBodies(p, b));
		expect(rx.acceptedOnce(a).map((g) => `${g.body.op}:${g.body.after?.title ?? "-"}`)).toEqual(["c:A0", "u:A1", "u:A2", "u:A3", "d:-", "r:A3", "u:A4"]);
		expect(rx.acceptedOnce(b).map((g) => `${g.body.op}:${g.body.after?.title}`)).toEqual(["c:B0", "u:B1", "u:B2", "u:B3", "u:B4"]);

		const rows = await deliveries(p, { document_id: a });
		expect(rows.every((r) => r.status === "delivered")).toBe(true);
		const first = await delivery(p, rows[0].id);
		expect(first.attempts).toBeGreaterThanOrEqual(3);
		const errors = first.attempts_list.map((t) => t.error ?? String(t.status));
		expect(errors.some((e) => /ECONNREFUSED/.test(e))).toBe(true);
		expect(first.attempts_list.slice(-1)[0]).toMatchObject({ status: 200, error: null });
		// The config stayed active: the receiver recovered within the schedule.
		const cfg = await p.http("GET", `/context/configs/${configId}`, { token });
		expect(cfg.body.data.value.active).toBeUndefined();
	}, 90_000);

	test("410 Gone disables the config; later events are recorded as disabled; replay re-enables and delivers", async () => {
		await settled(p);
		rx.mode = 410;
		const n = (await p.http("POST", "/content/notes", { token, body: { title: "gone" } })).body.data.id;
		const [row] = await waitFor("a disabled delivery", async () => {
			const rows = await deliveries(p, { document_id: n });
			return rows.length === 1 && rows[0].status === "disabled" && rows;
		});
		expect(row).toMatchObject({ attempts: 1, last_status: 410 });
		expect(rx.requests.filter((r) => r.body?.id === n)).toHaveLength(1);
		const cfg = await waitFor("the config disabled", async () => {
			const r = await p.http("GET", `/context/configs/${configId}`, { token });
			return r.body.data.value.active === false && r.body.data;
		});
		expect(cfg.value.disabled_reason).toMatch(/410/);
		expect(cfg.value.webhook).toBe(rx.url());

		// While disabled: recorded, never sent.
		const count = rx.requests.length;
		const m = (await p.http("POST", "/content/notes", { token, body: { title: "while disabled" } })).body.data.id;
		const [mrow] = await waitFor("a recorded disabled delivery", async () => {
			const rows = await deliveries(p, { document_id: m });
			return rows.length === 1 && rows;
		});
		expect(mrow).toMatchObject({ status: "disabled", attempts: 0 });
		await sleep(400);
		expect(rx.requests.length).toBe(count);

		// Replay: the operator action re-enables the config and re-queues the delivery.
		rx.mode = 200;
		const [delivered] = await deliveries(p, { status: "delivered", limit: 1 });
		await expect(p.broker.call("dispatcher.replay", { id: delivered.id })).rejects.toMatchObject({ code: 409 });
		await expect(p.broker.call("dispatcher.replay", { id: "999999999" })).rejects.toMatchObject({ code: 404 });
		await expect(p.broker.call("dispatcher.replay", {})).rejects.toMatchObject({ code: 400 });
		const res = (await p.broker.call("dispatcher.replay", { id: row.id })) as { requeued: number };
		expect(res.requeued).toBe(1);
		await waitFor("the replayed event", () => rx.accepted(n).length === 1);
		expect(rx.accepted(n)[0].body).toMatchObject({ id: n, op: "c" });
		await settled(p);
		// Same webhook-id as the 410 attempt: the receiver can tell it is the same message.
		expect(rx.accepted(n)[0].headers["webhook-id"]).toBe(rx.requests.find((r) => r.body?.id === n)!.headers["webhook-id"]);
		const back = await p.http("GET", `/context/configs/${configId}`, { token });
		// Re-enabled with its credentials kept (sealed at rest: never shown again).
		expect(back.body.data.value).toEqual({ webhook: rx.url() });
		const replayed = await delivery(p, row.id);
		expect(replayed.status).toBe("delivered");
		expect(replayed.attempts_list.map((t) => t.status)).toEqual([410, 200]);

		// Replay of everything a client missed.
		const all = (await p.broker.call("dispatcher.replay", { client_id: p.root.client_id })) as { requeued: number };
		expect(all.requeued).toBeGreaterThanOrEqual(1);
		await waitFor("the event written while disabled", () => rx.accepted(m).length === 1);
		await settled(p);
		expect((await deliveries(p, { document_id: m }))[0].status).toBe("delivered");
	});
});

describe("dispatcher, retries exhausted", () => {
	let p: TestPlatform;
	const rx = new Receiver();
	beforeAll(async () => {
		await rx.start();
		p = await bootPlatform({ webhookAllowPrivate: true, webhookRetrySchedule: [0, 0.2, 0.4] });
	}, 60_000);
	afterAll(async () => {
		await p?.cleanup();
		await rx.stop();
	});

	test("every attempt of the schedule, then failed and the config disabled; replay delivers", async () => {
		const token = await p.rootToken();
		const configId = await setWebhook(p, token, { webhook: rx.url(), secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" });
		// The config's own creation event goes through first; then the receiver starts failing.
		await waitFor("the config event", () => rx.accepted(configId).length === 1);
		await settled(p);
		rx.mode = 500;
		const n = (await p.http("POST", "/content/notes", { token, body: { title: "doomed" } })).body.data.id;
		const [row] = await waitFor("a failed delivery", async () => {
			const rows = await deliveries(p, { document_id: n });
			return rows.length === 1 && rows[0].status === "failed" && rows;
		});
		expect(row).toMatchObject({ attempts: 3, last_status: 500 });
		expect(row.last_error).toMatch(/gave up after 3 attempts: HTTP 500/);
		const tries = rx.requests.filter((r) => r.body?.id === n);
		expect(tries).toHaveLength(3);
		// One webhook-id across retries; backoff ≈ 0.2 s then ≈ 0.4 s (±20 % jitter).
		expect(new Set(tries.map((t) => t.headers["webhook-id"])).size).toBe(1);
		expect(tries[1].at - tries[0].at).toBeGreaterThanOrEqual(150);
		expect(tries[2].at - tries[1].at).toBeGreaterThanOrEqual(300);
		// whsec_ secrets sign with their base64-decoded key (Standard Webhooks libraries verify them unchanged).
		for (const t of tries)
			expect(
				verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", String(t.headers["webhook-id"]), Number(t.headers["webhook-timestamp"]), t.text, String(t.headers["webhook-signature"])),
			).toBe(true);
		const attempts = (await delivery(p, row.id)).attempts_list;
		expect(attempts.map((t) => [t.attempt, t.status])).toEqual([
			[1, 500],
			[2, 500],
			[3, 500],
		]);
		const cfg = await waitFor("the config disabled", async () => {
			const r = await p.http("GET", `/context/configs/${configId}`, { token });
			return r.body.data.value.active === false && r.body.data;
		});
		expect(cfg.value.disabled_reason).toMatch(/failed/);

		rx.mode = 200;
		await p.broker.call("dispatcher.replay", { id: row.id });
		await waitFor("the replayed event", () => rx.accepted(n).length === 1);
		await settled(p);
		expect((await delivery(p, row.id)).status).toBe("delivered");
	});
});

describe("dispatcher, private addresses refused without WEBHOOK_ALLOW_PRIVATE", () => {
	let p: TestPlatform;
	const rx = new Receiver();
	beforeAll(async () => {
		await rx.start();
		p = await bootPlatform({ webhookAllowPrivate: false, webhookRetrySchedule: [0, 0.2] });
	}, 60_000);
	afterAll(async () => {
		await p?.cleanup();
		await rx.stop();
	});

	test("a webhook on localhost is refused: no request, delivery failed, config disabled", async () => {
		const token = await p.rootToken();
		const url = `http://localhost:${rx.port}/hook`;
		const configId = await setWebhook(p, token, { webhook: url });
		// The first change the webhook would get is the config's own creation: refused, without a request.
		const [row] = await waitFor("a refused delivery", async () => {
			// (its deactivation is the config's next change: recorded as disabled)
			const rows = (await deliveries(p, { document_id: configId })).filter((r) => r.op === "c");
			return rows.length === 1 && rows[0].status === "failed" && rows;
		});
		// The category only: what `localhost` resolved to stays in the server log (runtime/address-guard.ts).
		expect(row.last_error).toBe("refused: webhook host localhost is not allowed: not a public address (loopback)");
		expect((await delivery(p, row.id)).attempts_list).toEqual([expect.objectContaining({ attempt: 1, status: null, url })]);
		// The config is disabled: later changes are recorded as disabled, never sent.
		const n = (await p.http("POST", "/content/notes", { token, body: { title: "private" } })).body.data.id;
		const [later] = await waitFor("a disabled delivery", async () => {
			const rows = await deliveries(p, { document_id: n });
			return rows.length === 1 && rows;
		});
		expect(later).toMatchObject({ status: "disabled", attempts: 0 });
		const cfg = await waitFor("the config disabled", async () => {
			const r = await p.http("GET", `/context/configs/${configId}`, { token });
			return r.body.data.value.active === false && r.body.data;
		});
		expect(cfg.value.disabled_reason).toMatch(/not a public address \(loopback\)$/);
		await sleep(300);
		expect(rx.requests).toHaveLength(0);
	});
});

servers.describe("dispatcher, real PostgreSQL (DATABASE_URL)", () => {
	const base = "postgres://postgres@127.0.0.1:5432/test";
	const schema = `dispatcher_test_${randomBytes(5).toString("hex")}`;
	let up = false;
	let admin: Pool | undefined;
	let p: TestPlatform | undefined;
	const rx = new Receiver();

	beforeAll(async () => {
		up = servers.up;
		if (!up) return;
		admin = new Pool({ connectionString: base, max: 2 });
		await admin.query(`create schema ${schema}`);
		await rx.start();
		p = await bootPlatform({
			webhookAllowPrivate: true,
			webhookRetrySchedule: [0, 0.2, 0.4],
			databaseUrl: `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
		});
	}, 60_000);
	afterAll(async () => {
		await p?.cleanup();
		await rx.stop();
		if (admin) {
			await admin.query(`drop schema if exists ${schema} cascade`);
			await admin.end();
		}
	});

	test("deliveries and attempts land in PostgreSQL, versioned migrations recorded", async () => {
		const token = await p!.rootToken();
		await setWebhook(p!, token, { webhook: rx.url(), authorization: AUTH });
		const n = (await p!.http("POST", "/content/notes", { token, body: { title: "pg" } })).body.data.id;
		expect((await p!.http("PATCH", `/content/notes/${n}`, { token, body: { title: "pg2" } })).status).toBe(200);
		await waitFor("two events", () => rx.accepted(n).length === 2);
		expect(rx.accepted(n).map((g) => g.headers.authorization)).toEqual([AUTH, AUTH]);
		expect(rx.accepted(n)[0].headers["webhook-signature"]).toBeUndefined();
		await settled(p!);
		const rows = await admin!.query(`select op, status, attempts, last_status from ${schema}.deliveries where document_id = $1 order by seq`, [n]);
		expect(rows.rows).toEqual([
			{ op: "c", status: "delivered", attempts: 1, last_status: 200 },
			{ op: "u", status: "delivered", attempts: 1, last_status: 200 },
		]);
		const att = await admin!.query(`select count(*)::int as n from ${schema}.delivery_attempts a join ${schema}.deliveries d on d.id = a.delivery_id where d.document_id = $1`, [
			n,
		]);
		expect(att.rows[0].n).toBe(2);
		const mig = await admin!.query(`select version from ${schema}.schema_migrations where component = 'dispatcher' order by version`);
		expect(mig.rows).toEqual([{ version: 1 }, { version: 2 }, { version: 3 }, { version: 4 }]);
		const h = (await p!.broker.call("dispatcher.health")) as { info: Record<string, { status: string }> };
		expect(h.info["relational store"]).toEqual({ status: "up" });
	});
});
