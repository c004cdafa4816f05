/**
 * Group commit on PostgreSQL (stores/pg.outbox.ts): concurrent creates share one statement, one transaction and
 * one WAL flush; each is still answered only once its own rows are committed, and a failure one of them causes (a
 * duplicate key, text PostgreSQL cannot store) fails that one only. Over HTTP, on both stores: concurrent creates of
 * two tenants, conflicts among them, give each request its own answer and each note to its own tenant only.
 */
import { rmSync } from "fs";
import { Client } from "pg";
import { Outbox } from "../../events/outbox";
import { PgStore, unitOfWork } from "../../stores";
import { needServers, tempDir } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";
import { recordStatements, testDatabase, type TestDatabase } from "../helpers/pg";
import { bootTenancy, type Tenancy } from "../helpers/tenants";

const servers = needServers(["PostgreSQL", 5432]);

let pg: TestDatabase | undefined;
beforeAll(async () => {
	pg = await testDatabase();
}, 30_000);
afterAll(async () => {
	await pg?.drop();
});

const event = (id: string) => ({ event: { id } as any, clients: [], actor: {} });

servers.describe("group commit: concurrent creates in one statement", () => {
	const dir = tempDir("pgstore-group-");
	let outbox: Outbox;
	let store: PgStore;
	let other: PgStore;
	let admin: Client;
	let recorded: ReturnType<typeof recordStatements>;
	const statements = () => recorded.statements;
	beforeAll(async () => {
		const cfg = { dataDir: dir, databaseUrl: pg!.url };
		outbox = new Outbox(cfg);
		store = new PgStore(cfg, `group_${unique()}`);
		other = new PgStore(cfg, `group_other_${unique()}`);
		await outbox.connect();
		await store.connect();
		await other.connect();
		admin = new Client({ connectionString: pg!.url });
		await admin.connect();
		recorded = recordStatements(admin);
	}, 30_000);
	afterAll(async () => {
		recorded?.restore();
		await admin.end();
		await other.disconnect();
		await store.disconnect();
		await outbox.disconnect();
		rmSync(dir, { recursive: true, force: true });
	});
	beforeEach(() => {
		statements().length = 0;
	});
	/** Committed, as another connection sees it. */
	const committed = async (s: PgStore, id: string) => (await admin.query(`select count(*)::int as n from ${s["table"]} where id = $1`, [id])).rows[0].n === 1;
	const eventAt = async (seq: number) => (await admin.query(`select rec from "_outbox" where seq = $1`, [seq])).rows[0]?.rec?.event?.id;
	const create = (s: PgStore, doc: Record<string, unknown> & { id: string }, events = 1) =>
		unitOfWork(async () => {
			await s.insert(doc as any, { hold: true });
			const recs = await outbox.append(Array.from({ length: events }, (_, i) => event(i ? `${doc.id}#${i}` : doc.id)));
			// Answered only after the commit: another connection sees the document and its events now.
			expect(await committed(s, doc.id)).toBe(true);
			return recs.map((r) => r.seq);
		});

	servers.test("30 concurrent creates on two tables: fewer statements than creates, every document and event there, positions without gaps", async () => {
		const ids = Array.from({ length: 30 }, (_, i) => hexId(100 + i));
		const seqs = await Promise.all(ids.map((id, i) => create(i % 3 ? store : other, { id, n: i, deleted_at: null }, 1 + (i % 2))));
		const appends = statements().filter((s) => /^with (d\d* |s )/.test(s));
		expect(appends.length).toBeLessThan(30);
		expect(appends.some((s) => s.startsWith("with d0 as (insert into") && s.includes("d1 as (insert into"))).toBe(true);
		expect(statements().filter((s) => s === "begin" || s === "commit")).toEqual([]);
		// Each create has its own events' positions, consecutive, and they hold its own events.
		for (const [i, mine] of seqs.entries()) {
			expect(mine).toHaveLength(1 + (i % 2));
			if (mine.length === 2) expect(mine[1]).toBe(mine[0] + 1);
			expect(await eventAt(mine[0])).toBe(ids[i]);
		}
		const all = seqs.flat().sort((a, b) => a - b);
		expect(all[all.length - 1] - all[0]).toBe(all.length - 1);
		expect(await store.count({ id: { $in: ids } })).toBe(20);
		expect(await other.count({ id: { $in: ids } })).toBe(10);
		expect(await store.findOne({ id: ids[1] })).toEqual({ id: ids[1], n: 1, deleted_at: null });
	});

	servers.test("a duplicate id among concurrent creates fails only its own create (23505); the others commit, no gap", async () => {
		const taken = hexId(200);
		await store.insert({ id: taken, n: 0, deleted_at: null });
		const ids = Array.from({ length: 20 }, (_, i) => (i === 7 ? taken : hexId(201 + i)));
		const out = await Promise.allSettled(ids.map((id, i) => create(store, { id, n: i + 1, deleted_at: null })));
		expect(out[7]).toMatchObject({ status: "rejected", reason: { code: "23505" } });
		const ok = out.filter((o): o is PromiseFulfilledResult<number[]> => o.status === "fulfilled");
		expect(ok).toHaveLength(19);
		expect(await store.findOne({ id: taken })).toEqual({ id: taken, n: 0, deleted_at: null });
		expect(await store.count({ id: { $in: ids } })).toBe(20);
		const all = ok.flatMap((o) => o.value).sort((a, b) => a - b);
		expect(all[all.length - 1] - all[0]).toBe(18);
	});

	servers.test("text PostgreSQL cannot store fails only its own create, with the 400 message; the others commit", async () => {
		const ids = Array.from({ length: 12 }, (_, i) => hexId(300 + i));
		const out = await Promise.allSettled(ids.map((id, i) => create(store, { id, title: i === 4 ? "nul\u0000inside" : `t${i}`, deleted_at: null })));
		expect(out[4]).toMatchObject({ status: "rejected", reason: { code: 400, message: "text containing NUL characters or unpaired surrogates cannot be stored" } });
		expect(out.filter((o) => o.status === "fulfilled")).toHaveLength(11);
		expect(await store.findOne({ id: ids[4] })).toBeNull();
		expect(await store.count({ id: { $in: ids } })).toBe(11);
	});

	servers.test("events without a document (no unit, or a unit that wrote nothing) group too and keep their order", async () => {
		const names = Array.from({ length: 10 }, (_, i) => `alone-${unique()}-${i}`);
		const seqs = await Promise.all(names.map((n, i) => (i % 2 ? unitOfWork(() => outbox.append([event(n)])) : outbox.append([event(n)]))));
		expect(statements().filter((s) => s === "begin" || s === "commit")).toEqual([]);
		for (const [i, [r]] of seqs.entries()) expect(await eventAt(r.seq)).toBe(names[i]);
	});
});

describe("concurrent creates of two tenants, conflicts among them", () => {
	let t: Tenancy;
	beforeAll(async () => {
		t = await bootTenancy();
	}, 180_000);
	afterAll(async () => {
		await t?.cleanup();
	});
	const CONFLICT = { statusCode: 409, message: "ref already exists", error: "Conflict" };

	test("each request its own answer: a's duplicate ref 409, b's same ref created; each note its own tenant's", async () => {
		const ref = `shared-${unique()}`;
		expect((await t.as(t.a.member.token, "POST", "/content/notes", { title: "first", ref })).status).toBe(200);
		const burst = Array.from({ length: 24 }, (_, i) => {
			const tenant = i % 2 ? t.b : t.a;
			// a's even requests 0 and 10 reuse a's ref (409); b's 3 reuses the same text in its own tenant (created once).
			const body = { title: `burst-${i}`, ...(i === 0 || i === 10 || i === 3 ? { ref } : {}) };
			return t.as(tenant.member.token, "POST", "/content/notes", body).then((r) => ({ i, tenant, r }));
		});
		const answers = await Promise.all(burst);
		for (const { i, tenant, r } of answers) {
			if (i === 0 || i === 10) {
				expect({ status: r.status, body: r.body }).toEqual({ status: 409, body: CONFLICT });
				continue;
			}
			expect(r.status).toBe(200);
			expect(r.body.data).toMatchObject({ title: `burst-${i}`, owner: tenant.member.id });
			const id = r.body.data.id;
			expect((await t.as(tenant.member.token, "GET", `/content/notes/${id}`)).body.data.title).toBe(`burst-${i}`);
			const stranger = tenant === t.a ? t.b : t.a;
			expect(await t.as(stranger.member.token, "GET", `/content/notes/${id}`)).toMatchObject({ status: 404, body: { statusCode: 404, error: "Not Found" } });
		}
		const count = async (tenant: typeof t.a, title: string) =>
			(await t.as(tenant.member.token, "GET", `/content/notes/count?query=${encodeURIComponent(JSON.stringify({ title }))}`)).body.total;
		expect(await count(t.a, "burst-0")).toBe(0);
		expect(await count(t.a, "burst-10")).toBe(0);
		expect(await count(t.b, "burst-3")).toBe(1);
		expect(await count(t.a, "burst-3")).toBe(0);
	}, 60_000);
});
