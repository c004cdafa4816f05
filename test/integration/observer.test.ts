/**
 * The observer (spec: Workers; Operations that cause events: "every create/update/delete → statistics aggregated
 * into special/stats"): traffic through HTTP, then special/stats read through HTTP, in the daily, monthly and
 * yearly buckets; redelivery of a change record does not count twice; stats writes feed nothing back.
 */
import { bootPlatform, dataDirHoldingOutbox, type TestPlatform } from "../helpers/platform";
import { payloadOf, sleep } from "../helpers/auth";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { bucketOf, PERIODS } from "../../lib/stat-buckets";
import { eventually } from "../helpers/wait";

let p: TestPlatform;
let token: string;
let cid: string;

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

/** The caller's stats of one collection, by period (the `client` zone: stats belong to the tenant). */
async function statsOf(service: string, collection: string): Promise<Record<string, any>> {
	const r = await p.http("GET", `/special/stats?zone=client&query=${q({ service, collection })}`, { token });
	expect(r.status).toBe(200);
	return Object.fromEntries(r.body.items.map((d: any) => [d.period, d]));
}

async function records(): Promise<OutboxRecord[]> {
	const out = sharedOutbox(p.cfg);
	await out.connect();
	try {
		const all: OutboxRecord[] = [];
		for (let after = 0; ;) {
			const batch = await out.readFrom(after, 1000);
			all.push(...batch);
			if (batch.length < 1000) return all;
			after = batch[batch.length - 1].seq;
		}
	} finally {
		await out.disconnect();
	}
}

type Applied = Promise<{ applied: number; skipped: number } | null>;
const observer = () => p.broker.getLocalService("observer") as unknown as { handleChange(rec: OutboxRecord): Applied; handleChanges(recs: OutboxRecord[]): Applied };

beforeAll(async () => {
	// Every change event stays readable (the tests read the outbox from its start; consumers passing prune it).
	p = await bootPlatform({ dataDir: dataDirHoldingOutbox() });
	token = await p.rootToken();
	cid = payloadOf(token).cid;
});
afterAll(() => p.cleanup());

test("N creates, M patches, K deletes and a restore are counted in all three buckets", async () => {
	const start = Date.now();
	const ids: string[] = [];
	// N = 5: three single creates and a bulk of two.
	for (let i = 0; i < 3; i++) {
		const r = await p.http("POST", "/content/tickets", { token, body: { title: `t${i}` } });
		expect(r.status).toBe(200);
		ids.push(r.body.data.id);
	}
	const bulk = await p.http("POST", "/content/tickets/bulk", { token, body: { items: [{ title: "b1" }, { title: "b2" }] } });
	expect(bulk.status).toBe(200);
	ids.push(...bulk.body.items.map((d: any) => d.id));
	// M = 3 patches.
	for (const id of ids.slice(0, 3)) expect((await p.http("PATCH", `/content/tickets/${id}`, { token, body: { status: "OPEN" } })).status).toBe(200);
	// K = 2 soft deletes, one of them restored.
	for (const id of ids.slice(3, 5)) expect((await p.http("DELETE", `/content/tickets/${id}`, { token })).status).toBe(200);
	expect((await p.http("PUT", `/content/tickets/${ids[3]}/restore`, { token })).status).toBe(200);
	// Destroying a soft-deleted document is not a second deletion; destroying a live one is a deletion.
	expect((await p.http("DELETE", `/content/tickets/${ids[4]}/destroy`, { token })).status).toBe(200);
	expect((await p.http("DELETE", `/content/tickets/${ids[0]}/destroy`, { token })).status).toBe(200);
	const end = Date.now();

	const want = { created: 5, updated: 3, deleted: 3, restored: 1 };
	const stats = await eventually(
		() => statsOf("content", "tickets"),
		(s) => PERIODS.every((per) => s[per]?.deleted === want.deleted && s[per]?.created === want.created),
	);
	expect(Object.keys(stats).sort()).toEqual([...PERIODS].sort());
	for (const period of PERIODS) {
		const s = stats[period];
		expect({ period, ...pick(s, ["service", "collection", "created", "updated", "deleted", "restored"]) }).toEqual({ period, service: "content", collection: "tickets", ...want });
		expect([bucketOf(period, start), bucketOf(period, end)]).toContain(s.bucket);
		expect(s.bucket).toMatch(period === "daily" ? /^\d{4}-\d{2}-\d{2}$/ : period === "monthly" ? /^\d{4}-\d{2}$/ : /^\d{4}$/);
		// The tenant's own document, stamped by the platform; the redelivery guard never leaves.
		expect(s.owner).toBe(cid);
		expect(s.clients).toEqual([cid]);
		expect(s.id).toMatch(/^[0-9a-f]{24}$/);
		expect(s).not.toHaveProperty("seqs");
	}
	// Readable by id too, and the counts of another collection are separate.
	expect((await p.http("GET", `/special/stats/${stats.daily.id}?zone=client`, { token })).body.data.created).toBe(5);
	expect(await statsOf("content", "posts")).toEqual({});
});

test("a redelivered change record does not count twice", async () => {
	const r = await p.http("POST", "/content/notes", { token, body: { title: "once" } });
	expect(r.status).toBe(200);
	const id = r.body.data.id;
	await eventually(
		() => statsOf("content", "notes"),
		(s) => s.daily?.created === 1,
	);
	const rec = (await records()).find((x) => x.event.id === id && x.event.op === "c")!;
	expect(rec).toBeDefined();

	// The stream already delivered it: a redelivery (twice) changes nothing.
	expect(await observer().handleChange(rec)).toEqual({ applied: 0, skipped: 3 });
	expect(await observer().handleChange(rec)).toEqual({ applied: 0, skipped: 3 });
	// A record never seen before counts once, however often it comes.
	const fresh: OutboxRecord = { ...rec, seq: rec.seq + 1_000_000_000, event: { ...rec.event, op: "u", ts_ms: Date.now() } };
	expect(await observer().handleChange(fresh)).toEqual({ applied: 3, skipped: 0 });
	expect(await observer().handleChange(fresh)).toEqual({ applied: 0, skipped: 3 });

	const s = await statsOf("content", "notes");
	for (const period of PERIODS) expect(pick(s[period], ["created", "updated", "deleted", "restored"])).toEqual({ created: 1, updated: 1, deleted: 0, restored: 0 });
});

test("a batch sums its increments per bucket, skipping what was counted and its own duplicates", async () => {
	const r = await p.http("POST", "/content/tickets", { token, body: { title: "batched" } });
	expect(r.status).toBe(200);
	const rec = (await records()).find((x) => x.event.id === r.body.data.id && x.event.op === "c")!;
	await eventually(
		() => statsOf("content", "tickets"),
		(s) => PERIODS.every((per) => s[per]?.created === 6),
	);
	const before = await statsOf("content", "tickets");
	const later = (n: number, op: "u" | "d"): OutboxRecord => ({
		...rec,
		seq: rec.seq + 3_000_000_000 + n,
		event: { ...rec.event, op, before: op === "d" ? { ...rec.event.after! } : undefined },
	});
	// Already counted, two updates and a delete, and one of the updates twice in the same batch.
	const batch = [rec, later(1, "u"), later(2, "u"), later(3, "d"), later(1, "u")];
	expect(await observer().handleChanges(batch)).toEqual({ applied: 9, skipped: 6 });
	expect(await observer().handleChanges(batch)).toEqual({ applied: 0, skipped: 15 });
	const after = await statsOf("content", "tickets");
	for (const period of PERIODS) {
		const was = before[period];
		expect(pick(after[period], ["created", "updated", "deleted"])).toEqual({ created: was.created, updated: was.updated + 2, deleted: was.deleted + 1 });
	}
});

test("stats writes append no change events, and writes to special/stats are never counted", async () => {
	const all = await records();
	expect(all.filter((x) => x.event.topic === "special.stats")).toEqual([]);
	// Callers cannot write counters: special/stats is written by the platform only.
	const own = await p.http("POST", "/special/stats", { token, body: { service: "x", collection: "y", period: "daily", bucket: "2000-01-01", created: 7 } });
	expect(own.status).toBe(405);
	// A change event of special/stats itself (e.g. a purge) is never counted.
	const any = all.at(-1)!;
	const statsEvent: OutboxRecord = {
		...any,
		seq: any.seq + 2_000_000_000,
		event: { ...any.event, topic: "special.stats", source: { ...any.event.source, db: "special", collection: "stats" } },
	};
	expect(await observer().handleChange(statsEvent)).toBeNull();
	await sleep(300);
	expect(await statsOf("special", "stats")).toEqual({});
	// The observer consumed everything: its position reached the end of the outbox, with no loop of new events.
	const last = (await records()).at(-1)!.seq;
	const consumer = (p.broker.getLocalService("observer") as any).consumer;
	await eventually(
		async () => consumer.position(),
		(pos: number) => pos >= last,
	);
	await sleep(700);
	expect((await records()).at(-1)!.seq).toBe(last);
});

test("each tenant sees the counts of its own documents only", async () => {
	// A second client with its own credentials (and grants) writes one note; root's counts do not move.
	// Its own domain: a domain belongs to one client (the operator grants subjects of any registered domain).
	const c = await p.http("POST", "/domain/clients", { token, body: { name: "tenant", domains: ["tenant.example"], scopes: ["whole"] } });
	if (c.status !== 200) throw new Error(`client creation failed: ${c.status} ${c.text}`);
	const tenantId = c.body.data.id as string;
	for (const [action, object] of [
		["manage", "content:notes"],
		["read", "special:stats"],
	])
		expect((await p.http("POST", "/auth/grants", { token, body: { subject: `${tenantId}@tenant.example`, action, object } })).status).toBe(200);
	const before = await statsOf("content", "notes");
	const t = await p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: tenantId, client_secret: c.body.data.secret } });
	if (t.status !== 200) throw new Error(`tenant token failed: ${t.status} ${t.text}`);
	const tenant = t.body.data.access_token as string;
	const w = await p.http("POST", "/content/notes", { token: tenant, body: { title: "tenant note" } });
	expect(w.status).toBe(200);
	// The tenant's token (identity = its client id) sees its stats in its default (own) zone.
	const mine = await eventually(
		async () => (await p.http("GET", `/special/stats?query=${q({ service: "content", collection: "notes" })}`, { token: tenant })).body,
		(b: any) => b.items?.length === 3,
	);
	expect(mine.items.map((d: any) => [d.period, d.created, d.clients]).sort()).toEqual([...PERIODS].sort().map((per) => [per, 1, [tenantId]]));
	expect(await statsOf("content", "notes")).toEqual(before);
});

function pick(o: Record<string, unknown>, keys: string[]): Record<string, unknown> {
	return Object.fromEntries(keys.map((k) => [k, o?.[k]]));
}
